//! A finding: one thing wrong, or worth knowing, said in a sentence. The
//! checkpoint doctor (`check`) and the memory analyses (`walk`, `record`)
//! both report findings, with one shape and one JSON form:
//! `{severity, code, message, tensor?, file?, t_secs?}`.

#![forbid(unsafe_code)]

use serde::Serialize;

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// It will not work, or works wrong.
    Error,
    /// Probably a mistake; worth a look.
    Warning,
    /// Worth knowing.
    Info,
}

impl Severity {
    /// Lower-case name.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Error => "error",
            Self::Warning => "warning",
            Self::Info => "info",
        }
    }
}

/// What a finding points at: a stored tensor, a file, a moment of a trace;
/// each where it has one.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Subject {
    /// The stored tensor it concerns.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tensor: Option<String>,
    /// The file it concerns.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// The moment (seconds on the trace's clock) it points at.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub t_secs: Option<f64>,
}

/// One finding. `C` is its code: a stable dotted name for the checkpoint
/// doctor's (`quant.missing-scales`; docs/check.md lists them), an enum
/// for the memory analyses' (`profile::FindingKind`, named in kebab case).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding<C = &'static str> {
    /// How bad.
    pub severity: Severity,
    /// What kind of finding it is (tests and the window key on it).
    pub code: C,
    /// One line for people.
    pub message: String,
    /// What it points at.
    #[serde(flatten)]
    pub subject: Subject,
}

impl<C> Finding<C> {
    /// A finding that points at nothing yet.
    #[must_use]
    pub fn new(severity: Severity, code: C, message: String) -> Self {
        Self {
            severity,
            code,
            message,
            subject: Subject::default(),
        }
    }

    /// The same, about the stored tensor `name`.
    #[must_use]
    pub fn tensor(mut self, name: &str) -> Self {
        self.subject.tensor = Some(name.to_owned());
        self
    }

    /// The same, about `file`.
    #[must_use]
    pub fn file(mut self, file: &str) -> Self {
        self.subject.file = Some(file.to_owned());
        self
    }

    /// The same, pointing at `t_secs` on the trace's clock when given.
    #[must_use]
    pub fn at(mut self, t_secs: Option<f64>) -> Self {
        self.subject.t_secs = t_secs;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, Copy, PartialEq, Serialize)]
    #[serde(rename_all = "kebab-case")]
    enum Kind {
        CacheAtPeak,
    }

    #[test]
    fn a_finding_has_one_json_form_whatever_its_code() {
        let doctor = Finding::new(Severity::Error, "quant.missing-scales", "no scales".into())
            .tensor("w")
            .file("model.safetensors");
        assert_eq!(
            serde_json::to_value(&doctor).expect("json"),
            serde_json::json!({
                "severity": "error",
                "code": "quant.missing-scales",
                "message": "no scales",
                "tensor": "w",
                "file": "model.safetensors",
            })
        );
        let memory =
            Finding::new(Severity::Warning, Kind::CacheAtPeak, "cache".into()).at(Some(1.5));
        assert_eq!(
            serde_json::to_value(&memory).expect("json"),
            serde_json::json!({
                "severity": "warning",
                "code": "cache-at-peak",
                "message": "cache",
                "t_secs": 1.5,
            })
        );
    }
}
