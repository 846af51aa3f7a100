//! What the globals a pickle imports say about it, in the three classes
//! picklescan reports (innocuous, suspicious, dangerous), so a verdict here
//! reads as one there does.
//!
//! Innocuous: what a tensor file needs and the reader here understands
//! without calling anything. Dangerous: modules and callables that run
//! commands, code or files when called (`os`, `posix`, `subprocess`,
//! `builtins.exec`…). Suspicious: every other global, which `torch.load`
//! would import and call and the reader here does not.

use serde::Serialize;

/// How safe a global is to import, in picklescan's three classes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Safety {
    /// Understood here; `torch.load(weights_only=True)` allows it.
    Innocuous,
    /// Neither known safe nor known to run code.
    Suspicious,
    /// Runs commands or code when called.
    Dangerous,
}

impl Safety {
    /// Its name, as picklescan prints it.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Innocuous => "innocuous",
            Self::Suspicious => "suspicious",
            Self::Dangerous => "dangerous",
        }
    }
}

/// Storage types torch writes, by name (in module `torch`).
pub(super) const STORAGE_TYPES: &[&str] = &[
    "FloatStorage",
    "DoubleStorage",
    "HalfStorage",
    "BFloat16Storage",
    "LongStorage",
    "IntStorage",
    "ShortStorage",
    "CharStorage",
    "ByteStorage",
    "BoolStorage",
    "ComplexFloatStorage",
    "ComplexDoubleStorage",
    "Float8_e4m3fnStorage",
    "Float8_e5m2Storage",
    "UInt16Storage",
    "UInt32Storage",
    "UInt64Storage",
    "UntypedStorage",
    "QInt8Storage",
    "QUInt8Storage",
    "QInt32Storage",
    "QUInt4x2Storage",
    "QUInt2x4Storage",
];

/// Globals the reader understands (by `module.name`) besides the storage
/// types.
const UNDERSTOOD: &[&str] = &[
    "collections.OrderedDict",
    "torch._utils._rebuild_tensor_v2",
    "torch._utils._rebuild_tensor",
    "torch._utils._rebuild_parameter",
    "torch._utils._rebuild_parameter_with_state",
    "torch._tensor._rebuild_from_type_v2",
    "torch.nn.parameter.Parameter",
    "torch.Size",
    "torch.device",
    "_codecs.encode",
];

/// Modules every one of whose names runs code, files or the network.
const DANGEROUS_MODULES: &[&str] = &[
    "os",
    "posix",
    "nt",
    "subprocess",
    "sys",
    "socket",
    "shutil",
    "runpy",
    "pty",
    "pdb",
    "bdb",
    "pickle",
    "_pickle",
    "pip",
    "pydoc",
    "timeit",
    "webbrowser",
    "ctypes",
    "asyncio",
    "aiohttp",
    "ssl",
    "venv",
    "commands",
    "httplib",
    "requests.api",
    "distutils.file_util",
    "numpy.f2py",
    "numpy.testing._private.utils",
];

/// Single callables that run code.
const DANGEROUS_NAMES: &[&str] = &[
    "builtins.eval",
    "builtins.exec",
    "builtins.compile",
    "builtins.getattr",
    "builtins.apply",
    "builtins.open",
    "builtins.breakpoint",
    "builtins.__import__",
    "__builtin__.eval",
    "__builtin__.exec",
    "__builtin__.compile",
    "__builtin__.getattr",
    "__builtin__.apply",
    "__builtin__.open",
    "__builtin__.breakpoint",
    "__builtin__.__import__",
    "functools.partial",
    "operator.attrgetter",
    "operator.itemgetter",
    "operator.methodcaller",
    "torch.serialization.load",
    "torch._inductor.codecache.compile_file",
    "cProfile.run",
    "cProfile.runctx",
    "code.InteractiveInterpreter.runcode",
];

/// The class of global `module.name`.
#[must_use]
pub fn classify(global: &str) -> Safety {
    if DANGEROUS_NAMES.contains(&global) {
        return Safety::Dangerous;
    }
    let module = global.rsplit_once('.').map_or(global, |(m, _)| m);
    // A module or any module above it (`os.path` is `os`'s).
    let mut above = module;
    loop {
        if DANGEROUS_MODULES.contains(&above) {
            return Safety::Dangerous;
        }
        match above.rsplit_once('.') {
            Some((parent, _)) => above = parent,
            None => break,
        }
    }
    if UNDERSTOOD.contains(&global)
        || global
            .strip_prefix("torch.")
            .is_some_and(|name| STORAGE_TYPES.contains(&name))
    {
        return Safety::Innocuous;
    }
    Safety::Suspicious
}

/// The verdict on a set of globals: the worst class among them
/// (innocuous when there are none).
#[must_use]
pub fn verdict<'a>(globals: impl IntoIterator<Item = &'a str>) -> Safety {
    globals
        .into_iter()
        .map(classify)
        .max()
        .unwrap_or(Safety::Innocuous)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_follow_the_module_and_the_name() {
        assert_eq!(classify("collections.OrderedDict"), Safety::Innocuous);
        assert_eq!(classify("torch.BFloat16Storage"), Safety::Innocuous);
        assert_eq!(
            classify("torch._utils._rebuild_tensor_v2"),
            Safety::Innocuous
        );
        assert_eq!(classify("posix.system"), Safety::Dangerous);
        assert_eq!(classify("os.path.join"), Safety::Dangerous);
        assert_eq!(classify("builtins.exec"), Safety::Dangerous);
        assert_eq!(classify("builtins.set"), Safety::Suspicious);
        assert_eq!(classify("numpy.core.multiarray.scalar"), Safety::Suspicious);
        assert_eq!(
            verdict(["torch.FloatStorage", "subprocess.Popen"]),
            Safety::Dangerous
        );
        assert_eq!(verdict([]), Safety::Innocuous);
    }
}
