//! Checkpoint views: the graph's canonical names over the names a file stores,
//! with optional lazy value repairs.

use std::collections::BTreeMap;

use crate::mlx::{Array, MlxError};

/// A lazy value repair: given the canonical name and the loaded array, return
/// a new lazy array (`Some`) or keep the loaded one (`None`).
pub type Fixup = Box<dyn Fn(&str, &Array) -> Result<Option<Array>, MlxError> + Send>;

/// Checkpoint-generation normalization, installed once before any tensor is
/// materialized. The Weights core only applies a view; its rules belong to the
/// model architecture that owns the naming.
#[derive(Default)]
pub struct View {
    /// Canonical name → stored name. A canonical name absent here does not
    /// exist (the way a reference `sanitize()` drops a tensor).
    pub names: BTreeMap<String, String>,
    /// Optional value repair (`RMSNorm` gamma stored as gamma-1, conv layouts).
    pub fixup: Option<Fixup>,
}

impl View {
    /// A view from `(canonical, stored)` pairs, with no fix-up.
    pub fn from_names<C: Into<String>, S: Into<String>>(
        names: impl IntoIterator<Item = (C, S)>,
    ) -> Self {
        Self {
            names: names
                .into_iter()
                .map(|(c, s)| (c.into(), s.into()))
                .collect(),
            fixup: None,
        }
    }

    /// Adds a value repair.
    #[must_use]
    pub fn with_fixup(
        mut self,
        fixup: impl Fn(&str, &Array) -> Result<Option<Array>, MlxError> + Send + 'static,
    ) -> Self {
        self.fixup = Some(Box::new(fixup));
        self
    }
}

impl std::fmt::Debug for View {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("View")
            .field("names", &self.names.len())
            .field("fixup", &self.fixup.is_some())
            .finish()
    }
}
