//! Hiding the passwords a connection string can carry, for logs and
//! messages (settings end up in both).

/// Hides every password a connection string can carry, in any form it
/// takes: URL user info (`postgres://u:pw@h`, `amqps://:pw@h`), a
/// `password=` query parameter, and libpq's `key=value` form
/// (`host=h password=pw`, quoted or not). What is not a password stays, so
/// an operator can still tell which server a message names.
pub fn redact(dsn: &str) -> String {
    mask_password_values(&mask_user_info(dsn))
}

pub(super) const MASK: &str = "***";

/// `scheme://user:password@host…` → `scheme://user:***@host…`. The last `@`
/// ends the user info, so a password holding `@` is hidden whole.
fn mask_user_info(dsn: &str) -> String {
    let Some(scheme_end) = dsn.find("://").map(|i| i + 3) else {
        return dsn.to_string();
    };
    let rest = &dsn[scheme_end..];
    let Some(at) = rest.rfind('@') else {
        return dsn.to_string();
    };
    match rest[..at].split_once(':') {
        Some((user, _)) => format!("{}{user}:{MASK}{}", &dsn[..scheme_end], &rest[at..]),
        None => dsn.to_string(),
    }
}

/// Every `…password=VALUE` (query parameter or libpq keyword, any case, spaces
/// around `=` allowed) gets its value masked; a quoted value ends at its
/// closing quote (`\'` escapes one), a bare one at whitespace or `&`.
fn mask_password_values(dsn: &str) -> String {
    let lower = dsn.to_ascii_lowercase();
    let mut out = String::with_capacity(dsn.len());
    let mut copied = 0;
    let mut from = 0;
    while let Some(found) = lower[from..].find("password") {
        let key_end = from + found + "password".len();
        let after_key = dsn[key_end..].trim_start();
        from = key_end;
        let Some(value) = after_key.strip_prefix('=') else {
            continue;
        };
        let value = value.trim_start();
        let value_start = dsn.len() - value.len();
        let value_end = value_start + value_len(value);
        out.push_str(&dsn[copied..value_start]);
        out.push_str(MASK);
        copied = value_end;
        from = value_end;
    }
    out.push_str(&dsn[copied..]);
    out
}

/// How many bytes of `rest` the value takes.
fn value_len(rest: &str) -> usize {
    if let Some(quoted) = rest.strip_prefix('\'') {
        let mut escaped = false;
        for (i, c) in quoted.char_indices() {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '\'' => return i + 2,
                _ => {}
            }
        }
        return rest.len();
    }
    rest.find(|c: char| c.is_whitespace() || c == '&').unwrap_or(rest.len())
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn url_passwords_never_print() {
        assert_eq!(redact("amqp://guest:secret@h:5672/%2f"), "amqp://guest:***@h:5672/%2f");
        assert_eq!(redact("amqps://guest:secret@h:5671/vhost"), "amqps://guest:***@h:5671/vhost");
        assert_eq!(redact("postgresql://u:secret@h:5432/db"), "postgresql://u:***@h:5432/db");
        assert_eq!(redact("postgres://:secret@h/db"), "postgres://:***@h/db");
        assert_eq!(redact("postgres://u:p@ss:w@rd@h/db"), "postgres://u:***@h/db");
    }

    #[test]
    fn urls_without_a_password_stay_as_they_are() {
        assert_eq!(redact("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(redact("postgres://h:5432/db"), "postgres://h:5432/db");
        assert_eq!(redact("amqp://127.0.0.1:5672/%2f"), "amqp://127.0.0.1:5672/%2f");
    }

    #[test]
    fn password_query_parameters_never_print() {
        assert_eq!(redact("postgres://u@h/db?password=secret"), "postgres://u@h/db?password=***");
        assert_eq!(
            redact("postgresql:///db?host=/run/pg&password=secret&sslmode=disable"),
            "postgresql:///db?host=/run/pg&password=***&sslmode=disable"
        );
        assert_eq!(redact("postgres://u:one@h/db?PASSWORD=two"), "postgres://u:***@h/db?PASSWORD=***");
    }

    #[test]
    fn key_value_passwords_never_print() {
        assert_eq!(redact("host=h user=u password=secret dbname=d"), "host=h user=u password=*** dbname=d");
        assert_eq!(redact("host=h password = secret"), "host=h password = ***");
        assert_eq!(redact("password='se cret' host=h"), "password=*** host=h");
        assert_eq!(redact(r"host=h password='it\'s secret' port=5432"), "host=h password=*** port=5432");
        assert_eq!(redact("host=h sslpassword=keypass"), "host=h sslpassword=***");
        assert_eq!(redact("host=h user=u dbname=d"), "host=h user=u dbname=d");
    }

    #[test]
    fn nothing_secret_is_left_in_any_form() {
        let forms = [
            "postgres://u:hunter2@h/db",
            "postgresql://u:hunter2@h/db?sslmode=require",
            "host=h password=hunter2",
            "host=h password='hunter2'",
            "postgres://h/db?password=hunter2",
            "amqps://u:hunter2@h/v",
        ];
        for form in forms {
            assert!(!redact(form).contains("hunter2"), "{form} → {}", redact(form));
        }
    }

    #[test]
    fn each_broker_of_a_list_hides_its_password() {
        let mut settings = crate::config::Settings::from_vars(|_| None).unwrap();
        settings.amqp_url = "amqp://guest:s1@n1:5682/%2f, amqp://guest:s2@n2:5683/%2f".into();
        assert_eq!(settings.amqp_url_redacted(), "amqp://guest:***@n1:5682/%2f,amqp://guest:***@n2:5683/%2f");
    }
}
