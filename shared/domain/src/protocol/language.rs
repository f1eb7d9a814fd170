//! The two reply languages a bridge may ask for.

use crate::wire_enum;

wire_enum! {
    /// The language of everything Baton says to the chat user.
    #[derive(Default)]
    pub enum Language {
        ZhCn => "zh-CN",
        #[default]
        En => "en",
    }
}
