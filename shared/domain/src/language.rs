//! The two reply languages a bridge may ask for.

use serde::{Deserialize, Serialize};

/// The language of everything Baton says to the chat user.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum Language {
    #[serde(rename = "zh-CN")]
    ZhCn,
    #[default]
    #[serde(rename = "en")]
    En,
}

impl Language {
    pub fn as_str(self) -> &'static str {
        match self {
            Language::ZhCn => "zh-CN",
            Language::En => "en",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "zh-CN" => Some(Language::ZhCn),
            "en" => Some(Language::En),
            _ => None,
        }
    }
}
