//! The one table of what a person can ask for from anywhere in the window:
//! each row a command of the bus, its palette entry, its key and its line
//! in F1's list. The palette, F1's list and the global keys are all made
//! from [`COMMANDS`], so a new command is one row. Keys that belong to one
//! panel (moving in a table, Enter in a field) are listed in
//! [`PANEL_KEYS`] and handled where they apply.

use egui::{Key, KeyboardShortcut, Modifiers};

use super::{AppCommand, Tab};

/// How a row's key works.
#[derive(Debug, Clone, Copy)]
pub(super) enum Keys {
    /// No key: the palette (and a button) only.
    None,
    /// Pressed anywhere, it sends the row's command ([`global_keys`]).
    Global(KeyboardShortcut),
    /// Handled by the panel whose field it focuses, which takes what is
    /// typed with it (`widgets::shortcut_with_typing`); `text` as F1 shows it.
    Panel(&'static str),
}

/// One row of the table.
pub(super) struct Binding {
    /// What it sends.
    pub command: AppCommand,
    /// Its palette entry.
    pub label: &'static str,
    /// Its key.
    pub keys: Keys,
    /// What F1's list says it does ("" to leave it out of the list).
    pub help: &'static str,
}

const SHIFT: Modifiers = Modifiers {
    alt: false,
    ctrl: false,
    shift: true,
    mac_cmd: false,
    command: true,
};

const fn key(modifiers: Modifiers, key: Key) -> Keys {
    Keys::Global(KeyboardShortcut::new(modifiers, key))
}

/// Every command, in the palette's order.
pub(super) fn commands() -> [Binding; 15] {
    [
        Binding {
            command: AppCommand::SetTheme(Some(egui::Theme::Light)),
            label: "Theme: light",
            keys: Keys::None,
            help: "",
        },
        Binding {
            command: AppCommand::SetTheme(Some(egui::Theme::Dark)),
            label: "Theme: dark",
            keys: Keys::None,
            help: "",
        },
        Binding {
            command: AppCommand::SetTheme(None),
            label: "Theme: as the system's",
            keys: Keys::None,
            help: "",
        },
        Binding {
            command: AppCommand::FocusPath(String::new()),
            label: "Open a checkpoint (path field)",
            keys: Keys::Panel("Ctrl+O"),
            help: "the checkpoint path field, its text selected",
        },
        Binding {
            command: AppCommand::FocusPath("hf://".into()),
            label: "Open a Hub repo (hf://ORG/REPO)",
            keys: Keys::None,
            help: "",
        },
        Binding {
            command: AppCommand::StartWalk,
            label: "Walk the checkpoint (the profiler's policy)",
            keys: key(SHIFT, Key::W),
            help: "walk the checkpoint with the Profiler's policy",
        },
        Binding {
            command: AppCommand::FocusDiff,
            label: "Diff with another checkpoint",
            keys: key(SHIFT, Key::D),
            help: "diff: B's path field (Enter there runs the diff)",
        },
        Binding {
            command: AppCommand::CheckValues,
            label: "Check: read every value",
            keys: key(SHIFT, Key::R),
            help: "check: read every value",
        },
        Binding {
            command: AppCommand::OpenRecordForm { attach: false },
            label: "Record a command (a job's memory)",
            keys: Keys::None,
            help: "",
        },
        Binding {
            command: AppCommand::OpenRecordForm { attach: true },
            label: "Attach to a running process",
            keys: Keys::None,
            help: "",
        },
        Binding {
            command: AppCommand::ShowTab(Tab::Tensors),
            label: "Show Tensors",
            keys: key(Modifiers::COMMAND, Key::Num1),
            help: "the Tensors tab",
        },
        Binding {
            command: AppCommand::ShowTab(Tab::Profiler),
            label: "Show Profiler",
            keys: key(Modifiers::COMMAND, Key::Num2),
            help: "the Profiler tab",
        },
        Binding {
            command: AppCommand::ShowTab(Tab::Diff),
            label: "Show Diff",
            keys: key(Modifiers::COMMAND, Key::Num3),
            help: "the Diff tab",
        },
        Binding {
            command: AppCommand::ShowTab(Tab::Check),
            label: "Show Check",
            keys: key(Modifiers::COMMAND, Key::Num4),
            help: "the Check tab",
        },
        Binding {
            command: AppCommand::ShowShortcuts,
            label: "Keyboard shortcuts",
            keys: Keys::Panel("F1, ?"),
            help: "this list",
        },
    ]
}

impl Keys {
    /// The keys as F1's list and the palette show them ("" for none).
    pub(super) fn text(self) -> String {
        match self {
            Self::None => String::new(),
            Self::Global(shortcut) => shortcut_text(shortcut),
            Self::Panel(text) => text.to_owned(),
        }
    }
}

/// `Ctrl+Shift+W`, as people write it (egui's own names say "Cmd" on a
/// Mac, as the key there is).
fn shortcut_text(shortcut: KeyboardShortcut) -> String {
    let mut text = String::new();
    if shortcut.modifiers.command || shortcut.modifiers.ctrl {
        text.push_str(if cfg!(target_os = "macos") {
            "Cmd+"
        } else {
            "Ctrl+"
        });
    }
    if shortcut.modifiers.alt {
        text.push_str("Alt+");
    }
    if shortcut.modifiers.shift {
        text.push_str("Shift+");
    }
    text.push_str(shortcut.logical_key.name());
    text
}

/// Keys that belong to one panel or field, as F1 lists them after the
/// commands.
pub(super) const PANEL_KEYS: &[(&str, &str)] = &[
    (
        "Ctrl+K, Ctrl+Shift+P",
        "command palette: actions, recent checkpoints, tensors by name",
    ),
    ("Ctrl+F", "the tensor filter, its text selected"),
    ("Down (in the filter)", "into the table"),
    (
        "Enter (in the filter)",
        "show the selected match (the first when none is)",
    ),
    (
        "Up, Down",
        "move in the table; the tensor there shows once you stop (within the preview budget)",
    ),
    (
        "Page Up, Page Down, Home, End",
        "move a page, to the first or last row (a tensor over the budget waits for Enter)",
    ),
    (
        "Enter, Space",
        "show the selected tensor now, whatever its size; open or close a layer group",
    ),
    (
        "Right, Left",
        "open or close a layer group; show or hide a weight's scales",
    ),
    (
        "Ctrl+C",
        "copy the selected tensor's name (right click: Copy name)",
    ),
    (
        "Ctrl+plus, Ctrl+minus, Ctrl+0",
        "zoom the window in, out, back to 100 % (remembered)",
    ),
    (
        "Diff tab: Up, Down, …, Enter",
        "move in the results, open the row; Esc closes it",
    ),
    ("Enter (in the path field)", "open the checkpoint"),
    ("Esc", "close the palette, this list, or the Record form"),
];

/// F1's list: each command with a key, then [`PANEL_KEYS`].
pub(super) fn shortcut_list() -> Vec<(String, &'static str)> {
    commands()
        .into_iter()
        .filter(|c| !matches!(c.keys, Keys::None) && !c.help.is_empty())
        .map(|c| (c.keys.text(), c.help))
        .chain(PANEL_KEYS.iter().map(|(k, w)| ((*k).to_owned(), *w)))
        .collect()
}

/// The commands whose global key was pressed this frame (the keys taken
/// from the input, so no panel sees them too).
pub(super) fn global_keys(ctx: &egui::Context) -> Vec<AppCommand> {
    commands()
        .into_iter()
        .filter_map(|c| match c.keys {
            Keys::Global(shortcut) => ctx
                .input_mut(|i| i.consume_shortcut(&shortcut))
                .then_some(c.command),
            Keys::None | Keys::Panel(_) => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_is_unique_and_written_as_people_write_it() {
        let list = shortcut_list();
        let keys: Vec<&str> = list.iter().map(|(k, _)| k.as_str()).collect();
        assert!(keys.contains(&"Ctrl+Shift+W"), "{keys:?}");
        assert!(keys.contains(&"Ctrl+1"), "{keys:?}");
        let mut seen = std::collections::HashSet::new();
        for key in keys {
            assert!(seen.insert(key), "{key} twice");
        }
    }
}
