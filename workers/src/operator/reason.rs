//! Why a run ended as it did, in one line: what `runs list`, `runs show`
//! and their `--json` say of a failed or cancelled run. One function, so
//! whatever a run's stored error comes to carry is read here once.

use baton_domain::run::state::Failure;

/// `code: reason` of a run's stored error (`runs.error`): its recorded cause
/// (a model endpoint's words, say) or else its message; `None` without one.
pub fn of(error: Option<&Failure>) -> Option<String> {
    error.map(|f| format!("{}: {}", f.code, super::table::one_line(f.reason())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reason_is_the_code_and_the_message_on_one_line() {
        let failure = Failure {
            code: "host_error".into(),
            message: "the agent stopped\nbadly".into(),
            details: Default::default(),
        };
        assert_eq!(of(Some(&failure)).as_deref(), Some("host_error: the agent stopped badly"));
        assert_eq!(of(None), None);
    }
}
