//! The zero-config run's demo API key (no `BOOTSTRAP_API_KEY` set): made on the first start
//! and kept in a file, so every later start uses the same key and what a user wrote down,
//! scripted or put in a client keeps working across restarts.
//!
//! The key becomes the start's bootstrap key: merchant `default` is made to authenticate it
//! by the same idempotent step a `BOOTSTRAP_API_KEY` takes, whether the database is new or
//! already knows the key.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use crate::db::pool::DatabaseTarget;
use crate::domain::new_api_key;

/// The file's name, beside the SQLite database (or under `data/`, see [`key_file`]).
pub const KEY_FILE_NAME: &str = "demo-api-key";

/// The demo key of this start.
#[derive(Debug)]
pub struct DemoKey {
    pub key: String,
    /// Where it is kept; `None` when the file could not be written (the key then lasts for
    /// this run only, as a warning says).
    pub file: Option<PathBuf>,
}

/// Where the demo key is kept for the database of `database_url`.
///
/// SQLite: beside the database file (`sqlite://data/payments.db` → `data/demo-api-key`),
/// so the key goes with the data it opens. PostgreSQL: `data/demo-api-key` under the
/// working directory, where the zero-config SQLite run keeps its files too; a database
/// server has no folder of ours to stand beside, and a deployment that cares which key
/// opens its database sets `BOOTSTRAP_API_KEY` (or uses `api-keys create`) instead.
pub fn key_file(database_url: &str) -> PathBuf {
    match DatabaseTarget::parse(database_url) {
        Ok(DatabaseTarget::Sqlite(database)) => database.with_file_name(KEY_FILE_NAME),
        Ok(DatabaseTarget::Postgres(_)) | Err(_) => Path::new("data").join(KEY_FILE_NAME),
    }
}

/// The demo key for the database of `database_url`: the one an earlier start kept, or a new
/// one, kept for the next starts (readable by this user only). A kept file that does not
/// hold a key stops the start: the user must look at it. A new key that cannot be written
/// (a read-only folder) still serves this run, with a warning.
pub fn api_key(database_url: &str) -> Result<DemoKey, String> {
    let file = key_file(database_url);
    if let Some(key) = read(&file)? {
        return Ok(DemoKey {
            key,
            file: Some(file),
        });
    }
    let key = new_api_key();
    match keep(&file, &key) {
        Ok(Kept::Written) => Ok(DemoKey {
            key,
            file: Some(file),
        }),
        // Another instance started at the same moment and kept its key first: use that one.
        Ok(Kept::AlreadyThere) => match read(&file)? {
            Some(key) => Ok(DemoKey {
                key,
                file: Some(file),
            }),
            None => Err(format!("{} vanished while starting", file.display())),
        },
        Err(e) => {
            tracing::warn!(
                file = %file.display(),
                error = %e,
                "cannot keep the demo API key; it lasts for this run only \
                 (set BOOTSTRAP_API_KEY to choose one)"
            );
            Ok(DemoKey { key, file: None })
        }
    }
}

/// The key kept in `file`, `None` when there is no such file.
fn read(file: &Path) -> Result<Option<String>, String> {
    let text = match std::fs::read_to_string(file) {
        Ok(text) => text,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(format!(
                "cannot read the demo API key {}: {e}",
                file.display()
            ));
        }
    };
    let key = text.trim();
    // The rule BOOTSTRAP_API_KEY is held to.
    if key.len() < 16 || key.bytes().any(|b| !b.is_ascii_graphic()) {
        return Err(format!(
            "{} does not hold an API key (at least 16 visible ASCII characters); delete it \
             to get a new demo key, or set BOOTSTRAP_API_KEY",
            file.display()
        ));
    }
    Ok(Some(key.to_owned()))
}

enum Kept {
    Written,
    AlreadyThere,
}

/// Writes `key` to `file`, never over an existing one and never half-written: the key goes
/// to a private temporary file first, which is then linked in place.
fn keep(file: &Path, key: &str) -> std::io::Result<Kept> {
    if let Some(folder) = file.parent().filter(|f| !f.as_os_str().is_empty()) {
        std::fs::create_dir_all(folder)?;
    }
    let temporary = file.with_file_name(format!(
        ".{KEY_FILE_NAME}.{}",
        uuid::Uuid::new_v4().simple()
    ));
    write_private(&temporary, &format!("{key}\n"))?;
    let linked = std::fs::hard_link(&temporary, file);
    let _ = std::fs::remove_file(&temporary);
    match linked {
        Ok(()) => Ok(Kept::Written),
        Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(Kept::AlreadyThere),
        Err(e) => Err(e),
    }
}

fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut out = options.open(path)?;
    out.write_all(text.as_bytes())?;
    out.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::merchants::{ensure_bootstrap_key, find_by_api_key, hash_api_key};
    use crate::db::migrate::run_migrations;
    use crate::db::pool::{DatabaseTarget, build_pool};

    /// A fresh folder under the system's temporary directory, removed when dropped.
    struct Folder(PathBuf);

    impl Folder {
        fn new() -> Self {
            let path = std::env::temp_dir().join(format!(
                "payments-api-demo-{}",
                uuid::Uuid::new_v4().simple()
            ));
            std::fs::create_dir_all(&path).unwrap();
            Self(path)
        }
    }

    impl Drop for Folder {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn the_key_is_kept_beside_the_sqlite_database_or_under_data() {
        assert_eq!(
            key_file("sqlite://data/payments.db"),
            Path::new("data/demo-api-key")
        );
        assert_eq!(
            key_file("sqlite:///var/lib/pay/p.db"),
            Path::new("/var/lib/pay/demo-api-key")
        );
        assert_eq!(
            key_file("postgres://postgres@127.0.0.1:5432/postgres"),
            Path::new("data/demo-api-key")
        );
    }

    #[test]
    fn the_first_start_keeps_a_new_key_that_later_starts_reuse() {
        let folder = Folder::new();
        let url = format!("sqlite://{}/sub/payments.db", folder.0.display());
        let first = api_key(&url).unwrap();
        let file = folder.0.join("sub").join(KEY_FILE_NAME);
        assert_eq!(first.file.as_deref(), Some(file.as_path()));
        assert!(first.key.starts_with("sk_test_"), "{}", first.key);
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            format!("{}\n", first.key)
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&file).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "{mode:o}");
        }
        for _ in 0..2 {
            assert_eq!(api_key(&url).unwrap().key, first.key);
        }
        // Nothing else is left in the folder (no temporary file).
        let names: Vec<_> = std::fs::read_dir(folder.0.join("sub"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [KEY_FILE_NAME]);
    }

    #[test]
    fn a_kept_file_that_holds_no_key_stops_the_start() {
        let folder = Folder::new();
        let url = format!("sqlite://{}/payments.db", folder.0.display());
        std::fs::write(folder.0.join(KEY_FILE_NAME), "short\n").unwrap();
        let error = api_key(&url).unwrap_err();
        assert!(error.contains("delete it"), "{error}");
    }

    /// The kept key opens merchant `default` on the first start and after a restart on the
    /// same database, registered as each start registers its bootstrap key.
    #[test]
    fn the_kept_key_authenticates_merchant_default_across_restarts() {
        let folder = Folder::new();
        let url = format!("sqlite://{}/payments.db", folder.0.display());
        for start in 0..2 {
            let demo = api_key(&url).unwrap();
            let pool = build_pool(DatabaseTarget::parse(&url).unwrap(), 1, true).unwrap();
            let mut conn = pool.get().unwrap();
            run_migrations(&mut conn).unwrap();
            ensure_bootstrap_key(&mut conn, &demo.key).unwrap();
            let merchant = find_by_api_key(&mut conn, &hash_api_key(&demo.key)).unwrap();
            assert_eq!(
                merchant.map(|m| m.name).as_deref(),
                Some("default"),
                "start {start}"
            );
        }
    }
}
