//! The demo never replaces a fleet's profiles. Profiles and routes are one
//! set per database, read by every worker on it, so applying the demo's
//! would reroute a running fleet's requests to scripted agents. The demo
//! applies its own only where the database has none, or where the set
//! there is the one the demo itself applied last (a marker in
//! `fleet_settings` holds that version); where the set there already is
//! the demo's, it applies nothing; anywhere else it refuses, saying why.

use std::collections::BTreeMap;

use baton_domain::profiles::{Profile, ProfilesFile};
use baton_domain::protocol::request::TargetAgent;
use baton_store::GenericClient;
use serde_json::{json, Value};

/// The `fleet_settings` key of the marker: the profiles version the demo applied.
const MARKER: &str = "demo";

/// What the database holds now.
#[derive(Debug, Clone, Default)]
pub struct Stored {
    pub version: i64,
    /// The version the demo applied last, if it did.
    pub marker: Option<i64>,
    pub profiles: Vec<Profile>,
    pub routes: BTreeMap<String, String>,
}

/// What the demo does with its profiles.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Apply them (a fresh database, or the demo's own set from before).
    Apply,
    /// The database holds exactly these already: apply nothing.
    Keep,
    /// Another set is there: leave it, and say why.
    Refuse(String),
}

/// Whether the demo may put `demo` in place of what is `stored`.
pub fn decide(stored: &Stored, demo: &ProfilesFile) -> Decision {
    if stored.profiles.is_empty() && stored.routes.is_empty() {
        return Decision::Apply;
    }
    if stored.marker == Some(stored.version) {
        return Decision::Apply;
    }
    if specs(&stored.profiles) == specs(&demo.profiles) && stored.routes == demo.routes.clone().into_iter().collect() {
        return Decision::Keep;
    }
    let ids: Vec<&str> = stored.profiles.iter().map(|p| p.id.as_str()).collect();
    Decision::Refuse(format!(
        "this database holds profiles that `baton demo` did not apply ({}; profiles version {}): a fleet may be \
         running on them, and the demo would replace them and their routes. Run the demo against a database of \
         its own (it creates it), e.g. DATABASE_URL=postgres://postgres@127.0.0.1:5432/baton_demo",
        ids.join(", "),
        stored.version
    ))
}

/// Each profile as the JSON it is stored as, by id.
fn specs(profiles: &[Profile]) -> BTreeMap<&str, Value> {
    profiles.iter().map(|p| (p.id.as_str(), serde_json::to_value(p).unwrap_or_default())).collect()
}

/// Reads what the database holds: the profiles, every target's route, the version and the marker.
async fn read(c: &impl GenericClient) -> anyhow::Result<Stored> {
    let mut routes = BTreeMap::new();
    for target in TargetAgent::ALL.map(TargetAgent::as_str) {
        if let Some(profile) = baton_store::profiles::route(c, target).await? {
            routes.insert(target.to_string(), profile);
        }
    }
    let marker = baton_store::profiles::settings::get(c, MARKER).await?;
    Ok(Stored {
        version: baton_store::profiles::version(c).await?,
        marker: marker.and_then(|m| m["profilesVersion"].as_i64()),
        profiles: baton_store::profiles::all(c).await?,
        routes,
    })
}

/// Reads what is stored, decides, and on [`Decision::Apply`] applies the
/// demo's profiles and marks the version they became: one transaction under
/// the store's apply lock, so no other apply comes between the reading and
/// the writing.
pub async fn apply_if_allowed(client: &mut baton_store::Client, file: &ProfilesFile) -> anyhow::Result<Decision> {
    let tx = client.transaction().await?;
    baton_store::profiles::lock_applies(&tx).await?;
    let decision = decide(&read(&tx).await?, file);
    if decision == Decision::Apply {
        baton_store::profiles::apply(&tx, file).await?;
        let version = baton_store::profiles::version(&tx).await?;
        baton_store::profiles::settings::put(&tx, MARKER, &json!({"profilesVersion": version})).await?;
    }
    tx.commit().await?;
    Ok(decision)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEMO: &str = include_str!("../../../examples/profiles.toml");
    const FLEET: &str = "[routes]\ndocs_agent = \"solo\"\n\n[[profiles]]\nid = \"solo\"\nname = \"Solo\"\n\
                         description = \"d\"\ntools = [\"workspace_finish\"]\n[profiles.model]\nprovider = \"openai\"\n\
                         base_url = \"https://api.example.com/v1\"\nmodel = \"m\"\n";

    fn stored(file: &str, version: i64, marker: Option<i64>) -> Stored {
        let file = ProfilesFile::parse(file).unwrap();
        Stored { version, marker, profiles: file.profiles, routes: file.routes.into_iter().collect() }
    }

    #[test]
    fn a_fresh_database_or_the_demos_own_set_gets_the_demos_profiles() {
        let demo = ProfilesFile::parse(DEMO).unwrap();
        assert_eq!(decide(&Stored::default(), &demo), Decision::Apply);
        assert_eq!(decide(&stored(FLEET, 4, Some(4)), &demo), Decision::Apply, "the demo applied version 4 itself");
        assert_eq!(decide(&stored(DEMO, 9, None), &demo), Decision::Keep, "the same set: nothing to apply");
    }

    #[test]
    fn a_fleets_own_profiles_are_left_alone_with_a_reason() {
        let demo = ProfilesFile::parse(DEMO).unwrap();
        let Decision::Refuse(why) = decide(&stored(FLEET, 5, Some(4)), &demo) else {
            panic!("applied over a fleet's profiles, applied again after the demo's");
        };
        assert!(
            why.contains("did not apply (solo; profiles version 5)") && why.contains("database of its own"),
            "{why}"
        );
        assert!(matches!(decide(&stored(FLEET, 1, None), &demo), Decision::Refuse(_)));
    }
}
