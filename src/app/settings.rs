//! Saved settings (recent checkpoints), kept apart from runtime state and
//! written only to weightscope's own config folder, never next to a model.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// How many recent checkpoints are remembered.
const RECENT: usize = 10;

/// What weightscope remembers between runs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settings {
    /// Checkpoints opened, newest first.
    #[serde(default)]
    pub recent: Vec<PathBuf>,
    /// The previews' budget in bytes (none: the default, 512 MiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview_budget: Option<u64>,
    /// The window's zoom in percent (Ctrl+plus, Ctrl+minus; none: 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zoom_percent: Option<u32>,
    /// `light` or `dark`; none: as the system's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub theme: Option<String>,
}

impl Settings {
    /// `$XDG_CONFIG_HOME/weightscope/settings.json` (or `~/.config/...`).
    #[must_use]
    pub fn default_path() -> Option<PathBuf> {
        crate::environment::get()
            .outside
            .user_config()
            .map(|base| base.join("weightscope").join("settings.json"))
    }

    /// Reads `path`; a missing, unreadable or oversized (over 1 MiB) file,
    /// or one that is not a regular file, gives empty settings (a broken
    /// settings file must never stop the app).
    #[must_use]
    pub fn load(path: &Path) -> Self {
        crate::files::read_bounded(path, 1 << 20, "the settings file")
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default()
    }

    /// Writes to `path` (via a temporary file, so a crash leaves the old one).
    ///
    /// # Errors
    /// When the folder or file cannot be written.
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
            return Err(std::io::Error::other("a settings path with no file name"));
        };
        // The settings folder is weightscope's own: whatever is at the
        // settings file's name (a link) is replaced, never written through.
        let bytes = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        crate::files::replace_settings(dir, name, &bytes)
    }

    /// Puts `path` first in the recent list.
    pub fn remember(&mut self, path: &Path) {
        self.recent.retain(|p| p != path);
        self.recent.insert(0, path.to_path_buf());
        self.recent.truncate(RECENT);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recent_checkpoints_round_trip_newest_first_without_duplicates() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("sub").join("settings.json");
        let mut settings = Settings::load(&file);
        assert!(settings.recent.is_empty(), "missing file: empty settings");
        for p in ["/a", "/b", "/a"] {
            settings.remember(Path::new(p));
        }
        assert_eq!(settings.recent, [PathBuf::from("/a"), PathBuf::from("/b")]);
        settings.save(&file).expect("save");
        assert_eq!(Settings::load(&file), settings);
        std::fs::write(&file, "not json").expect("write");
        assert_eq!(
            Settings::load(&file),
            Settings::default(),
            "a broken file is ignored"
        );
    }

    #[test]
    fn a_link_at_the_settings_name_is_replaced_and_a_shared_folder_still_saves() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().expect("tempdir");
        let folder = dir.path().join("weightscope");
        std::fs::create_dir(&folder).expect("mkdir");
        // Made under umask 002 by an earlier version.
        std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o775)).expect("chmod");
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"keep").expect("write");
        let file = folder.join("settings.json");
        std::os::unix::fs::symlink(&victim, &file).expect("symlink");
        let mut settings = Settings::default();
        settings.remember(Path::new("/m"));
        settings.save(&file).expect("save");
        assert_eq!(std::fs::read(&victim).expect("read"), b"keep");
        assert!(std::fs::symlink_metadata(&file).expect("stat").is_file());
        assert_eq!(Settings::load(&file), settings);
    }
}
