//! The request the demo sends, as a WeChat bridge would: the sample
//! request, about what the example agents write (Friday's school trip to
//! the science museum), in the language asked for, with the example
//! profiles of that language, so the reply is on the request's subject and
//! in its language.

use anyhow::bail;
use baton_domain::protocol::request::sample_request_json;
use serde_json::Value;

/// The built-in profiles of each language.
const EXAMPLE_PROFILES: &str = include_str!("../../../examples/profiles.toml");
const EXAMPLE_PROFILES_ZH: &str = include_str!("../../../examples/profiles.zh-CN.toml");

/// The languages a request may ask for (docs/bridge-protocol.md#requests).
const LANGUAGES: [&str; 2] = ["en", "zh-CN"];

/// The built-in profiles for `language`.
pub fn example_profiles(language: &str) -> &'static str {
    if language == "zh-CN" {
        EXAMPLE_PROFILES_ZH
    } else {
        EXAMPLE_PROFILES
    }
}

/// Refuses a language no request may ask for.
pub fn check_language(language: &str) -> anyhow::Result<()> {
    if !LANGUAGES.contains(&language) {
        bail!("--language is en or zh-CN, not `{language}`");
    }
    Ok(())
}

/// The demo's request `id` for `target`, in `language`.
pub fn build(id: &str, target: &str, language: &str) -> anyhow::Result<Value> {
    check_language(language)?;
    let (intent, ask, answer) = match language {
        "zh-CN" => (
            "帮我写一则给家长的简短通知：本周五去科学博物馆参观，请准备午餐，周三前交回签字的回执。",
            "周五要带孩子们去科学博物馆，能帮我写个家长通知吗？",
            "好的，我请文档助手来写，稍后发给你。",
        ),
        _ => (
            "Write a short note to parents: Friday's school trip to the science museum; pack a lunch, signed forms back by Wednesday.",
            "We're taking the class to the science museum on Friday, can you draft a note for the parents?",
            "Sure, I'll ask the docs agent and send it to you shortly.",
        ),
    };
    let mut request = sample_request_json(id, target, language);
    request["userIntent"] = intent.into();
    request["context"]["recentConversation"][0]["content"] = ask.into();
    request["context"]["recentConversation"][1]["content"] = answer.into();
    Ok(request)
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_domain::profiles::ProfilesFile;

    fn is_chinese(text: &str) -> bool {
        text.chars().any(|c| ('\u{4e00}'..='\u{9fff}').contains(&c))
    }

    /// The text the example chain leaves in `output/main.md`: the writer's
    /// draft with every scripted patch applied in turn.
    fn final_text(profiles: &ProfilesFile) -> String {
        let mut text = String::new();
        for id in ["writer", "editor", "finalizer"] {
            let p = profiles.profiles.iter().find(|p| p.id == id).unwrap();
            let baton_domain::profiles::ModelBinding::Scripted { script } = &p.model else {
                panic!("{id} is scripted")
            };
            for turn in script {
                match turn.tool.as_deref() {
                    Some("workspace_write") => text = turn.args["content"].as_str().unwrap().to_string(),
                    Some("workspace_patch") => {
                        let old = turn.args["old_string"].as_str().unwrap();
                        assert!(text.contains(old), "{id}'s patch finds `{old}` in:\n{text}");
                        text = text.replacen(old, turn.args["new_string"].as_str().unwrap(), 1);
                    }
                    _ => {}
                }
            }
        }
        text
    }

    #[test]
    fn the_chinese_example_is_the_english_one_in_other_words() {
        let en = ProfilesFile::parse(EXAMPLE_PROFILES).unwrap();
        let zh = ProfilesFile::parse(EXAMPLE_PROFILES_ZH).unwrap();
        assert_eq!(en.routes, zh.routes);
        assert_eq!(serde_json::to_value(&en.budgets).unwrap(), serde_json::to_value(&zh.budgets).unwrap());
        assert_eq!(en.profiles.len(), zh.profiles.len());
        for (e, z) in en.profiles.iter().zip(&zh.profiles) {
            assert_eq!(
                (&e.id, &e.tools, &e.delegation, e.ask_timeout),
                (&z.id, &z.tools, &z.delegation, z.ask_timeout)
            );
            let tools = |p: &baton_domain::profiles::Profile| match &p.model {
                baton_domain::profiles::ModelBinding::Scripted { script } => {
                    script.iter().map(|t| t.tool.clone()).collect::<Vec<_>>()
                }
                _ => panic!("scripted"),
            };
            assert_eq!(tools(e), tools(z), "{}: the same calls in the same order", e.id);
        }
    }

    #[test]
    fn each_languages_chain_writes_about_the_requests_subject_in_that_language() {
        let en = final_text(&ProfilesFile::parse(EXAMPLE_PROFILES).unwrap());
        let zh = final_text(&ProfilesFile::parse(EXAMPLE_PROFILES_ZH).unwrap());
        assert!(!is_chinese(&en) && en.contains("science museum") && en.contains("Wednesday"), "{en}");
        assert!(is_chinese(&zh) && zh.contains("科学博物馆") && zh.contains("周三"), "{zh}");
        let en_request = build("d-1", "docs_agent", "en").unwrap();
        let zh_request = build("d-1", "docs_agent", "zh-CN").unwrap();
        assert!(en_request["userIntent"].as_str().unwrap().contains("science museum"));
        assert!(zh_request["userIntent"].as_str().unwrap().contains("科学博物馆"));
        assert_eq!(zh_request["constraints"]["language"], "zh-CN");
        assert!(build("d-1", "docs_agent", "fr").is_err());
    }
}
