use super::*;

fn config() -> CallbacksConfig {
    let text = r#"
allowed_origins = ["https://bridge.example.com", "http://127.0.0.1:8088"]
[sources.weixin]
secret_env = "BATON_CALLBACK_SECRET_WEIXIN"
"#;
    toml::from_str(text).unwrap()
}

#[test]
fn a_url_on_an_allowed_origin_of_a_configured_source_is_signed_with_its_variable() {
    let c = config();
    assert_eq!(
        c.check("weixin", "https://bridge.example.com/handoffs/h1?token=abc"),
        Ok("BATON_CALLBACK_SECRET_WEIXIN")
    );
    assert_eq!(
        c.check("weixin", "https://bridge.example.com:443/x"),
        Ok("BATON_CALLBACK_SECRET_WEIXIN"),
        "the default port is the same origin"
    );
    assert_eq!(c.check("weixin", "http://127.0.0.1:8088/status"), Ok("BATON_CALLBACK_SECRET_WEIXIN"));
    assert!(c.problems().is_empty(), "{:?}", c.problems());
}

#[test]
fn scheme_host_and_port_must_all_match_an_allowed_origin() {
    let c = config();
    for url in [
        "http://bridge.example.com/handoffs",
        "https://bridge.example.com:8443/handoffs",
        "https://evil.example.com/handoffs",
        "https://bridge.example.com.evil.example/handoffs",
        "http://127.0.0.1:8089/status",
        "http://localhost:8088/status",
    ] {
        assert!(matches!(c.check("weixin", url), Err(Refusal::OriginNotAllowed(_))), "{url} was let through");
    }
    let Err(why) = c.check("weixin", "https://evil.example.com/a?token=abc") else { panic!() };
    assert_eq!(
        why.to_string(),
        "the callback URL's origin https://evil.example.com is not in [callbacks] allowed_origins"
    );
}

#[test]
fn without_an_allow_list_or_a_secret_callbacks_are_refused_with_the_reason() {
    assert_eq!(CallbacksConfig::default().check("weixin", "https://bridge.example.com/"), Err(Refusal::NoAllowList));
    assert!(Refusal::NoAllowList.to_string().contains("allowed_origins"));
    let c = config();
    assert_eq!(c.check("admin", "https://bridge.example.com/"), Err(Refusal::NoSecret("admin".into())));
    for url in ["ftp://bridge.example.com/", "/relative", "file:///etc/passwd", "not a url"] {
        assert_eq!(c.check("weixin", url), Err(Refusal::NotHttp), "{url}");
    }
}

#[test]
fn allow_list_entries_must_be_origins_and_sources_must_name_a_variable() {
    let bad = CallbacksConfig {
        allowed_origins: vec![
            "https://ok.example".into(),
            "https://a.example/path".into(),
            "https://a.example/?q=1".into(),
            "bridge.example".into(),
            "https://u:p@a.example".into(),
        ],
        sources: [
            ("weixin".into(), SourceSigning { secret_env: "whsec_abc".into() }),
            ("telegram".into(), SourceSigning { secret_env: "X".into() }),
        ]
        .into(),
    };
    let problems = bad.problems().join("\n");
    assert_eq!(bad.problems().len(), 6, "{problems}");
    assert!(problems.contains("`https://a.example/path` is not an origin"), "{problems}");
    assert!(problems.contains("`sources.telegram` is not a request source"), "{problems}");
    assert!(problems.contains("`sources.weixin.secret_env` must name an environment variable"), "{problems}");
}

#[test]
fn a_logged_url_keeps_no_query_fragment_or_credentials() {
    assert_eq!(
        loggable_url("https://u:pw@bridge.example.com:8443/h/1?token=s3cret#frag"),
        "https://bridge.example.com:8443/h/1"
    );
    assert_eq!(loggable_url("http://127.0.0.1:9/status?sig=abc"), "http://127.0.0.1:9/status");
    assert_eq!(loggable_url("javascript:alert(1)?x"), "(not an http URL)");
}

#[test]
fn a_webhook_id_is_stable_per_status_distinct_across_statuses_and_has_no_dot() {
    assert_eq!(webhook_id("h.1", 2), webhook_id("h.1", 2));
    assert_ne!(webhook_id("h.1", 2), webhook_id("h.1", 3));
    assert_ne!(webhook_id("h.1", 2), webhook_id("h.2", 2));
    let id = webhook_id("a.b.c", 1);
    assert!(id.starts_with("msg_") && id.len() == 36 && !id.contains('.'), "{id}");
}
