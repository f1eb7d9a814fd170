//! Whether a database's applied migrations are the ones a binary was built
//! with. A role refuses to start on any other schema: a binary newer than its
//! database would query tables that are not there yet, and one older than its
//! database would write rows a newer schema no longer means the same way.

use std::fmt;

/// One migration, as the binary embeds it or as the database recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Migration {
    pub version: i32,
    pub name: String,
    /// The migration runner's checksum of the version, name and SQL.
    pub checksum: String,
}

impl Migration {
    fn label(&self) -> String {
        format!("V{}__{}", self.version, self.name)
    }
}

/// Why a binary and its database do not match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// In the binary, not applied to the database.
    pub missing: Vec<Migration>,
    /// Applied to the database, unknown to the binary.
    pub unknown: Vec<Migration>,
    /// The same version on both sides with another name or content.
    pub changed: Vec<Migration>,
    pub binary_at: Option<i32>,
    pub database_at: Option<i32>,
}

/// Compares the binary's migrations with the database's.
pub fn check(binary: &[Migration], database: &[Migration]) -> Result<(), Mismatch> {
    let find = |list: &[Migration], version: i32| list.iter().find(|m| m.version == version).cloned();
    let missing: Vec<Migration> = binary.iter().filter(|m| find(database, m.version).is_none()).cloned().collect();
    let unknown: Vec<Migration> = database.iter().filter(|m| find(binary, m.version).is_none()).cloned().collect();
    let changed: Vec<Migration> = binary
        .iter()
        .filter(|m| find(database, m.version).is_some_and(|d| d.name != m.name || d.checksum != m.checksum))
        .cloned()
        .collect();
    if missing.is_empty() && unknown.is_empty() && changed.is_empty() {
        return Ok(());
    }
    let latest = |list: &[Migration]| list.iter().map(|m| m.version).max();
    Err(Mismatch { missing, unknown, changed, binary_at: latest(binary), database_at: latest(database) })
}

fn labels(list: &[Migration]) -> String {
    list.iter().map(Migration::label).collect::<Vec<_>>().join(", ")
}

fn at(version: Option<i32>) -> String {
    version.map_or("no migrations".to_string(), |v| format!("V{v}"))
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let versions = format!("database at {}, this binary at {}", at(self.database_at), at(self.binary_at));
        if !self.unknown.is_empty() {
            // Ahead wins: migrating cannot help, only a newer binary can.
            return write!(
                f,
                "this binary is older than the database: the database has {} that this binary does not know ({versions}); \
                 run a binary built with these migrations",
                labels(&self.unknown)
            );
        }
        if !self.changed.is_empty() {
            return write!(
                f,
                "the database applied {} with other contents than this binary has ({versions}); \
                 a migration file was changed after it ran",
                labels(&self.changed)
            );
        }
        write!(
            f,
            "the database is behind this binary: {} not applied ({versions}); run `baton migrate` first",
            labels(&self.missing)
        )
    }
}

impl std::error::Error for Mismatch {}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(version: i32, name: &str) -> Migration {
        Migration { version, name: name.into(), checksum: format!("{version}{name}") }
    }

    #[test]
    fn the_same_migrations_match() {
        assert_eq!(check(&[m(1, "a"), m(2, "b")], &[m(2, "b"), m(1, "a")]), Ok(()));
    }

    #[test]
    fn a_database_behind_the_binary_says_to_migrate() {
        let e = check(&[m(1, "a"), m(2, "b")], &[m(1, "a")]).unwrap_err();
        assert_eq!(e.missing, vec![m(2, "b")]);
        let text = e.to_string();
        assert!(text.contains("behind") && text.contains("V2__b") && text.contains("run `baton migrate`"), "{text}");
        assert!(text.contains("database at V1, this binary at V2"), "{text}");
    }

    #[test]
    fn an_empty_database_is_behind() {
        let text = check(&[m(1, "a")], &[]).unwrap_err().to_string();
        assert!(text.contains("database at no migrations") && text.contains("baton migrate"), "{text}");
    }

    #[test]
    fn a_database_ahead_of_the_binary_says_the_binary_is_older() {
        let e = check(&[m(1, "a")], &[m(1, "a"), m(9, "future")]).unwrap_err();
        let text = e.to_string();
        assert!(text.contains("this binary is older than the database") && text.contains("V9__future"), "{text}");
        assert!(!text.contains("baton migrate"), "migrating cannot help: {text}");
    }

    #[test]
    fn a_changed_migration_is_named() {
        let mut edited = m(2, "b");
        edited.checksum = "other".into();
        let text = check(&[m(1, "a"), m(2, "b")], &[m(1, "a"), edited]).unwrap_err().to_string();
        assert!(text.contains("other contents") && text.contains("V2__b"), "{text}");
    }
}
