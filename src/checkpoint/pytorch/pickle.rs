//! A pickle machine that executes nothing.
//!
//! It reads the opcodes `torch.save` writes (and the rest of protocols 0 to
//! 5), building plain values in an arena. A global the pickle imports is
//! never looked up or called: the few that a tensor file needs
//! (`collections.OrderedDict`, torch's tensor rebuilders, its storage
//! types) are understood here by their names, and every other one becomes
//! an [`Value::Opaque`] that records what it would have called. Each
//! global is kept, with its place in [`super::verdict`]'s classes.
//!
//! Bounded: the pickle's bytes are capped by the caller; here the stack,
//! the memo, the items of all containers and each string are capped, so
//! no pickle makes this use more than a small multiple of its own size.

use std::collections::HashMap;
use std::rc::Rc;

/// At most this many values on the stack at once.
const MAX_STACK: usize = 1 << 20;
/// At most this many memo entries.
const MAX_MEMO: usize = 1 << 24;
/// At most this many container items in all (lists, dicts, tuples).
const MAX_ITEMS: usize = 1 << 26;
/// The most bytes of a global's module or name kept (longer ones are cut,
/// marked `…`).
const MAX_GLOBAL_PART: usize = 256;
/// The most distinct globals listed (a real checkpoint imports a dozen).
pub const MAX_GLOBALS: usize = 4096;
/// At most this many bytes in one string or bytes value.
const MAX_STRING_BYTES: u64 = 1 << 26;

/// A container in the arena.
pub type NodeId = u32;

/// One value of the pickle.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// `None`.
    None,
    /// `True` / `False`.
    Bool(bool),
    /// An integer that fits in 64 bits.
    Int(i64),
    /// An integer too large for 64 bits (its value is not kept).
    BigInt,
    /// A float.
    Float(f64),
    /// A text string.
    Str(Rc<str>),
    /// A bytes value (its length; the bytes are not kept).
    Bytes(u64),
    /// A tuple (arena node).
    Tuple(NodeId),
    /// A list (arena node).
    List(NodeId),
    /// A dict (arena node).
    Dict(NodeId),
    /// A set or frozenset (arena node, a list of its items).
    Set(NodeId),
    /// A global the pickle imports, by `module.name`.
    Global(Rc<str>),
    /// What calling a global would have made; it was never called.
    Opaque(Rc<str>),
    /// A storage named by a persistent id.
    Storage(StorageRef),
    /// A tensor rebuilt by one of torch's rebuilders.
    Tensor(Rc<TensorValue>),
    /// The stack's mark (never a value a pickle can see).
    Mark,
}

/// A storage a persistent id names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorageRef {
    /// Its key (the zip entry `data/<key>`, or the legacy key).
    pub key: Rc<str>,
    /// Its element type, from the storage type's name (`FloatStorage`).
    pub kind: Rc<str>,
    /// Elements the persistent id says it holds.
    pub numel: u64,
    /// Elements before this view of it (legacy files' view metadata).
    pub view_offset: u64,
}

/// A tensor as torch's rebuilder would have made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorValue {
    /// Its storage.
    pub storage: StorageRef,
    /// Elements of the storage before its first.
    pub offset: u64,
    /// Its shape.
    pub shape: Vec<u64>,
    /// Its strides, in elements.
    pub stride: Vec<u64>,
}

/// An arena node.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Node {
    /// A list, tuple or set's items.
    Items(Vec<Value>),
    /// A dict's pairs.
    Pairs(Vec<(Value, Value)>),
    /// Nothing (a node freed).
    #[default]
    Empty,
}

/// Why a pickle cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PickleError {
    /// The bytes end inside an opcode.
    #[error("the pickle ends inside an opcode at byte {0}")]
    Truncated(usize),
    /// An opcode this reader does not know.
    #[error("unknown pickle opcode 0x{opcode:02x} at byte {at}")]
    UnknownOpcode {
        /// The byte.
        opcode: u8,
        /// Where.
        at: usize,
    },
    /// An opcode that needs what the stack does not hold.
    #[error("malformed pickle at byte {at}: {what}")]
    Malformed {
        /// Where.
        at: usize,
        /// What was wrong.
        what: &'static str,
    },
    /// A bound was reached.
    #[error("the pickle exceeds the reader's bound on {0}")]
    Bound(&'static str),
    /// No `STOP` before the end.
    #[error("the pickle has no STOP opcode")]
    NoStop,
}

/// A pickle read: its value, the containers it refers to, and every global
/// it imports (in first-seen order, each once).
#[derive(Debug, Default)]
pub struct Unpickled {
    /// The value `STOP` returned.
    pub root: Option<Value>,
    /// Containers, by [`NodeId`].
    pub nodes: Vec<Node>,
    /// `module.name` of every global imported, each once, up to
    /// [`MAX_GLOBALS`]; past it only a global of a class not yet listed
    /// (so the verdict, the worst class, is the same as with every one).
    pub globals: Vec<String>,
    /// Distinct globals past [`MAX_GLOBALS`] not listed.
    pub globals_unlisted: u64,
    /// Where the pickle ended (the byte after `STOP`).
    pub end: usize,
}

impl Unpickled {
    /// The items of a list, tuple or set node.
    #[must_use]
    pub fn items(&self, node: NodeId) -> &[Value] {
        match self.nodes.get(node as usize) {
            Some(Node::Items(items)) => items,
            _ => &[],
        }
    }

    /// The pairs of a dict node.
    #[must_use]
    pub fn pairs(&self, node: NodeId) -> &[(Value, Value)] {
        match self.nodes.get(node as usize) {
            Some(Node::Pairs(pairs)) => pairs,
            _ => &[],
        }
    }
}

/// The persistent-id convention of the file: what a `('storage', …)` tuple
/// holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Persistent {
    /// The zip format: `(tag, type, key, location, numel)`.
    Zip,
    /// The legacy format: `(tag, type, root_key, location, numel,
    /// view_metadata)`.
    Legacy,
}

struct Machine<'a> {
    data: &'a [u8],
    pos: usize,
    stack: Vec<Value>,
    marks: Vec<usize>,
    memo: HashMap<u64, Value>,
    out: Unpickled,
    items: usize,
    persistent: Persistent,
    seen: std::collections::HashSet<String>,
    /// The classes of the globals listed (innocuous, suspicious, dangerous).
    classes: [bool; 3],
}

/// Reads one pickle from the start of `data` under the `persistent`
/// convention. Nothing it names is called.
///
/// # Errors
/// A malformed or truncated pickle, an unknown opcode, a bound reached.
pub fn unpickle(data: &[u8], persistent: Persistent) -> Result<Unpickled, PickleError> {
    let mut m = Machine {
        data,
        pos: 0,
        stack: Vec::new(),
        marks: Vec::new(),
        memo: HashMap::new(),
        out: Unpickled::default(),
        items: 0,
        persistent,
        seen: std::collections::HashSet::new(),
        classes: [false; 3],
    };
    m.run()?;
    m.out.end = m.pos;
    Ok(m.out)
}

impl Machine<'_> {
    fn malformed(&self, what: &'static str) -> PickleError {
        PickleError::Malformed { at: self.pos, what }
    }

    fn take(&mut self, n: u64) -> Result<&[u8], PickleError> {
        let start = self.pos;
        let end = usize::try_from(n)
            .ok()
            .and_then(|n| start.checked_add(n))
            .filter(|&end| end <= self.data.len())
            .ok_or(PickleError::Truncated(start))?;
        self.pos = end;
        Ok(&self.data[start..end])
    }

    fn u8(&mut self) -> Result<u8, PickleError> {
        Ok(self.take(1)?[0])
    }

    /// The memo key of a PUT or GET opcode: a line of text (`p`, `g`), one
    /// byte (`q`, `h`) or four (`r`, `j`).
    fn memo_key(&mut self, op: u8) -> Result<u64, PickleError> {
        match op {
            b'p' | b'g' => {
                let line = String::from_utf8_lossy(self.line()?).into_owned();
                line.trim()
                    .parse()
                    .map_err(|_| self.malformed("bad memo key"))
            }
            b'q' | b'h' => self.le(1),
            _ => self.le(4),
        }
    }

    fn le(&mut self, n: u64) -> Result<u64, PickleError> {
        let bytes = self.take(n)?;
        Ok(bytes
            .iter()
            .rev()
            .fold(0_u64, |acc, &b| (acc << 8) | u64::from(b)))
    }

    fn line(&mut self) -> Result<&[u8], PickleError> {
        let start = self.pos;
        let rest = &self.data[start..];
        let n = rest
            .iter()
            .position(|&b| b == b'\n')
            .ok_or(PickleError::Truncated(start))?;
        if n as u64 > MAX_STRING_BYTES {
            return Err(PickleError::Bound("string length"));
        }
        self.pos = start + n + 1;
        Ok(&self.data[start..start + n])
    }

    fn text(&mut self, n: u64) -> Result<Value, PickleError> {
        if n > MAX_STRING_BYTES {
            return Err(PickleError::Bound("string length"));
        }
        let bytes = self.take(n)?;
        Ok(Value::Str(String::from_utf8_lossy(bytes).into()))
    }

    fn bytes(&mut self, n: u64) -> Result<Value, PickleError> {
        self.take(n)?;
        Ok(Value::Bytes(n))
    }

    fn push(&mut self, value: Value) -> Result<(), PickleError> {
        if self.stack.len() >= MAX_STACK {
            return Err(PickleError::Bound("stack depth"));
        }
        self.stack.push(value);
        Ok(())
    }

    fn pop(&mut self) -> Result<Value, PickleError> {
        if self.marks.last().is_some_and(|&m| m >= self.stack.len()) {
            return Err(self.malformed("pop past a mark"));
        }
        self.stack
            .pop()
            .ok_or(self.malformed("pop from an empty stack"))
    }

    fn top(&mut self) -> Result<&mut Value, PickleError> {
        let at = self.pos;
        self.stack.last_mut().ok_or(PickleError::Malformed {
            at,
            what: "empty stack",
        })
    }

    fn pop_mark(&mut self) -> Result<Vec<Value>, PickleError> {
        let mark = self.marks.pop().ok_or(self.malformed("no mark"))?;
        if mark > self.stack.len() {
            return Err(self.malformed("mark past the stack"));
        }
        Ok(self.stack.split_off(mark))
    }

    fn node(&mut self, node: Node) -> Result<NodeId, PickleError> {
        let n = match &node {
            Node::Items(v) => v.len(),
            Node::Pairs(v) => v.len(),
            Node::Empty => 0,
        };
        self.count(n + 1)?;
        let id =
            NodeId::try_from(self.out.nodes.len()).map_err(|_| PickleError::Bound("containers"))?;
        self.out.nodes.push(node);
        Ok(id)
    }

    fn count(&mut self, n: usize) -> Result<(), PickleError> {
        self.items = self.items.saturating_add(n);
        if self.items > MAX_ITEMS {
            return Err(PickleError::Bound("container items"));
        }
        Ok(())
    }

    fn tuple(&mut self, items: Vec<Value>) -> Result<Value, PickleError> {
        Ok(Value::Tuple(self.node(Node::Items(items))?))
    }

    fn global(&mut self, module: &str, name: &str) -> Value {
        // No real module or name is this long; a pickle naming one from its
        // memo many times must not build megabytes a name.
        let part = |text: &str| -> String {
            if text.len() <= MAX_GLOBAL_PART {
                return text.to_owned();
            }
            let mut end = MAX_GLOBAL_PART;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            format!("{}\u{2026}", &text[..end])
        };
        let full = format!("{}.{}", part(module), part(name));
        if !self.seen.contains(&full) {
            let class = super::verdict::classify(&full) as usize;
            let listed = self.classes.get(class).copied().unwrap_or(true);
            if self.seen.len() < MAX_GLOBALS || !listed {
                self.seen.insert(full.clone());
                self.out.globals.push(full.clone());
                if let Some(slot) = self.classes.get_mut(class) {
                    *slot = true;
                }
            } else {
                self.out.globals_unlisted += 1;
            }
        }
        Value::Global(full.into())
    }

    fn memo_put(&mut self, key: u64) -> Result<(), PickleError> {
        let value = self.top()?.clone();
        if self.memo.len() >= MAX_MEMO && !self.memo.contains_key(&key) {
            return Err(PickleError::Bound("memo size"));
        }
        self.memo.insert(key, value);
        Ok(())
    }

    fn memo_get(&mut self, key: u64) -> Result<(), PickleError> {
        let value = self
            .memo
            .get(&key)
            .cloned()
            .ok_or(self.malformed("memo key not set"))?;
        self.push(value)
    }

    fn append(&mut self, values: Vec<Value>) -> Result<(), PickleError> {
        self.count(values.len())?;
        let target = self.top()?.clone();
        match target {
            Value::List(id) | Value::Set(id) => {
                if let Some(Node::Items(items)) = self.out.nodes.get_mut(id as usize) {
                    items.extend(values);
                }
                Ok(())
            }
            // Appending to what was never made (a job's own class): the
            // items are dropped, as nothing reads them.
            Value::Opaque(_) => Ok(()),
            _ => Err(self.malformed("append to what is not a list")),
        }
    }

    fn set_items(&mut self, values: Vec<Value>) -> Result<(), PickleError> {
        if !values.len().is_multiple_of(2) {
            return Err(self.malformed("odd number of dict items"));
        }
        self.count(values.len() / 2)?;
        let target = self.top()?.clone();
        match target {
            Value::Dict(id) => {
                if let Some(Node::Pairs(pairs)) = self.out.nodes.get_mut(id as usize) {
                    let mut it = values.into_iter();
                    while let (Some(k), Some(v)) = (it.next(), it.next()) {
                        pairs.push((k, v));
                    }
                }
                Ok(())
            }
            Value::Opaque(_) => Ok(()),
            _ => Err(self.malformed("set items on what is not a dict")),
        }
    }

    #[allow(clippy::too_many_lines)] // one arm an opcode: the table is the function
    fn run(&mut self) -> Result<(), PickleError> {
        loop {
            let at = self.pos;
            let Some(&op) = self.data.get(at) else {
                return Err(PickleError::NoStop);
            };
            self.pos += 1;
            match op {
                0x80 => {
                    self.u8()?;
                }
                0x95 => {
                    self.le(8)?;
                }
                b'.' => {
                    let root = self.pop()?;
                    self.out.root = Some(root);
                    return Ok(());
                }
                b'(' => {
                    if self.marks.len() >= MAX_STACK {
                        return Err(PickleError::Bound("marks"));
                    }
                    self.marks.push(self.stack.len());
                }
                b'0' => {
                    if self.marks.last() == Some(&self.stack.len()) {
                        self.marks.pop();
                    } else {
                        self.pop()?;
                    }
                }
                b'1' => {
                    self.pop_mark()?;
                }
                b'2' => {
                    let top = self.top()?.clone();
                    self.push(top)?;
                }
                b'N' => self.push(Value::None)?,
                0x88 => self.push(Value::Bool(true))?,
                0x89 => self.push(Value::Bool(false))?,
                b'J' => {
                    let v = self.le(4)?;
                    #[allow(clippy::cast_possible_truncation)] // four bytes
                    self.push(Value::Int(i64::from((v as u32).cast_signed())))?;
                }
                b'K' => {
                    let v = self.le(1)?;
                    self.push(Value::Int(i64::try_from(v).unwrap_or(0)))?;
                }
                b'M' => {
                    let v = self.le(2)?;
                    self.push(Value::Int(i64::try_from(v).unwrap_or(0)))?;
                }
                0x8a => {
                    let n = u64::from(self.u8()?);
                    let v = self.long(n)?;
                    self.push(v)?;
                }
                0x8b => {
                    let n = self.le(4)?;
                    if n > MAX_STRING_BYTES {
                        return Err(PickleError::Bound("integer length"));
                    }
                    let v = self.long(n)?;
                    self.push(v)?;
                }
                b'I' | b'L' => {
                    let line = String::from_utf8_lossy(self.line()?).into_owned();
                    let text = line.trim_end_matches('L');
                    let v = match text {
                        "00" if op == b'I' => Value::Bool(false),
                        "01" if op == b'I' => Value::Bool(true),
                        _ => text.parse().map_or(Value::BigInt, Value::Int),
                    };
                    self.push(v)?;
                }
                b'F' => {
                    let line = String::from_utf8_lossy(self.line()?).into_owned();
                    let v = line
                        .trim()
                        .parse()
                        .map_err(|_| self.malformed("bad float"))?;
                    self.push(Value::Float(v))?;
                }
                b'G' => {
                    let bytes = self.take(8)?;
                    let mut b = [0_u8; 8];
                    b.copy_from_slice(bytes);
                    self.push(Value::Float(f64::from_be_bytes(b)))?;
                }
                b'X' => {
                    let n = self.le(4)?;
                    let v = self.text(n)?;
                    self.push(v)?;
                }
                0x8c => {
                    let n = u64::from(self.u8()?);
                    let v = self.text(n)?;
                    self.push(v)?;
                }
                0x8d => {
                    let n = self.le(8)?;
                    let v = self.text(n)?;
                    self.push(v)?;
                }
                b'V' | b'S' => {
                    let line = String::from_utf8_lossy(self.line()?).into_owned();
                    let text = if op == b'S' {
                        line.trim_matches(|c| c == '\'' || c == '"').to_owned()
                    } else {
                        line
                    };
                    self.push(Value::Str(text.into()))?;
                }
                b'T' | b'B' => {
                    let n = self.le(4)?;
                    let v = if op == b'T' {
                        self.text(n)?
                    } else {
                        self.bytes(n)?
                    };
                    self.push(v)?;
                }
                b'U' | b'C' => {
                    let n = u64::from(self.u8()?);
                    let v = if op == b'U' {
                        self.text(n)?
                    } else {
                        self.bytes(n)?
                    };
                    self.push(v)?;
                }
                0x8e | 0x96 => {
                    let n = self.le(8)?;
                    let v = self.bytes(n)?;
                    self.push(v)?;
                }
                0x97 | 0x98 => return Err(self.malformed("out-of-band buffers are not read")),
                b')' => {
                    let v = self.tuple(Vec::new())?;
                    self.push(v)?;
                }
                b't' => {
                    let items = self.pop_mark()?;
                    let v = self.tuple(items)?;
                    self.push(v)?;
                }
                0x85..=0x87 => {
                    let n = usize::from(op - 0x84);
                    if self.stack.len() < n
                        || self.marks.last().is_some_and(|&m| m > self.stack.len() - n)
                    {
                        return Err(self.malformed("tuple of more than the stack holds"));
                    }
                    let items = self.stack.split_off(self.stack.len() - n);
                    let v = self.tuple(items)?;
                    self.push(v)?;
                }
                b']' | b'l' => {
                    let items = if op == b'l' {
                        self.pop_mark()?
                    } else {
                        Vec::new()
                    };
                    let id = self.node(Node::Items(items))?;
                    self.push(Value::List(id))?;
                }
                b'}' | b'd' => {
                    let pairs = if op == b'd' {
                        let items = self.pop_mark()?;
                        if items.len() % 2 != 0 {
                            return Err(self.malformed("odd number of dict items"));
                        }
                        let mut it = items.into_iter();
                        let mut pairs = Vec::new();
                        while let (Some(k), Some(v)) = (it.next(), it.next()) {
                            pairs.push((k, v));
                        }
                        pairs
                    } else {
                        Vec::new()
                    };
                    let id = self.node(Node::Pairs(pairs))?;
                    self.push(Value::Dict(id))?;
                }
                0x8f => {
                    let id = self.node(Node::Items(Vec::new()))?;
                    self.push(Value::Set(id))?;
                }
                0x91 => {
                    let items = self.pop_mark()?;
                    let id = self.node(Node::Items(items))?;
                    self.push(Value::Set(id))?;
                }
                b'a' => {
                    let v = self.pop()?;
                    self.append(vec![v])?;
                }
                b'e' | 0x90 => {
                    let items = self.pop_mark()?;
                    self.append(items)?;
                }
                b's' => {
                    let v = self.pop()?;
                    let k = self.pop()?;
                    self.set_items(vec![k, v])?;
                }
                b'u' => {
                    let items = self.pop_mark()?;
                    self.set_items(items)?;
                }
                // PUT (its key as text), BINPUT (one byte), LONG_BINPUT
                // (four); MEMOIZE (the next key).
                b'p' | b'q' | b'r' => {
                    let key = self.memo_key(op)?;
                    self.memo_put(key)?;
                }
                0x94 => {
                    let key = self.memo.len() as u64;
                    self.memo_put(key)?;
                }
                // GET, BINGET, LONG_BINGET: their keys as PUT's.
                b'g' | b'h' | b'j' => {
                    let key = self.memo_key(op)?;
                    self.memo_get(key)?;
                }
                b'c' => {
                    let module = String::from_utf8_lossy(self.line()?).into_owned();
                    let name = String::from_utf8_lossy(self.line()?).into_owned();
                    let v = self.global(&module, &name);
                    self.push(v)?;
                }
                0x93 => {
                    let name = self.pop()?;
                    let module = self.pop()?;
                    let (Value::Str(module), Value::Str(name)) = (module, name) else {
                        return Err(self.malformed("STACK_GLOBAL of what is not text"));
                    };
                    let v = self.global(&module, &name);
                    self.push(v)?;
                }
                b'i' => {
                    let module = String::from_utf8_lossy(self.line()?).into_owned();
                    let name = String::from_utf8_lossy(self.line()?).into_owned();
                    let callable = self.global(&module, &name);
                    let args = self.pop_mark()?;
                    let v = self.call(&callable, &args);
                    self.push(v)?;
                }
                b'o' => {
                    let mut items = self.pop_mark()?;
                    if items.is_empty() {
                        return Err(self.malformed("OBJ without a class"));
                    }
                    let callable = items.remove(0);
                    let v = self.call(&callable, &items);
                    self.push(v)?;
                }
                b'R' | 0x81 => {
                    let args = self.pop()?;
                    let callable = self.pop()?;
                    let args = match args {
                        Value::Tuple(id) => self.out.items(id).to_vec(),
                        _ => return Err(self.malformed("call with arguments that are not a tuple")),
                    };
                    let v = self.call(&callable, &args);
                    self.push(v)?;
                }
                0x92 => {
                    let _kwargs = self.pop()?;
                    let args = self.pop()?;
                    let callable = self.pop()?;
                    let args = match args {
                        Value::Tuple(id) => self.out.items(id).to_vec(),
                        _ => Vec::new(),
                    };
                    let v = self.call(&callable, &args);
                    self.push(v)?;
                }
                b'b' => {
                    // The state of an object: torch keeps a state dict's
                    // `_metadata` there. Nothing is set; nothing is called.
                    self.pop()?;
                    self.top()?;
                }
                b'Q' => {
                    let pid = self.pop()?;
                    let v = self.persistent_load(&pid);
                    self.push(v)?;
                }
                b'P' => {
                    self.line()?;
                    self.push(Value::Opaque("persistent id".into()))?;
                }
                0x82..=0x84 => return Err(self.malformed("extension registry codes are not read")),
                _ => return Err(PickleError::UnknownOpcode { opcode: op, at }),
            }
        }
    }

    fn long(&mut self, n: u64) -> Result<Value, PickleError> {
        let bytes = self.take(n)?;
        if bytes.is_empty() {
            return Ok(Value::Int(0));
        }
        if bytes.len() > 8 {
            return Ok(Value::BigInt);
        }
        let mut buf = [0_u8; 8];
        buf[..bytes.len()].copy_from_slice(bytes);
        if bytes.last().is_some_and(|&b| b & 0x80 != 0) {
            for b in &mut buf[bytes.len()..] {
                *b = 0xff;
            }
        }
        Ok(Value::Int(i64::from_le_bytes(buf)))
    }

    /// What calling `callable` with `args` would make, built from the
    /// arguments for the globals understood here; anything else is an
    /// [`Value::Opaque`] naming it. Nothing is ever called.
    fn call(&mut self, callable: &Value, args: &[Value]) -> Value {
        let name = match callable {
            Value::Global(name) => name.clone(),
            Value::Opaque(name) => return Value::Opaque(name.clone()),
            _ => return Value::Opaque("a call of what is not a global".into()),
        };
        let made = match &*name {
            "collections.OrderedDict" | "builtins.dict" | "__builtin__.dict" if args.is_empty() => {
                self.node(Node::Pairs(Vec::new())).ok().map(Value::Dict)
            }
            "torch._utils._rebuild_tensor_v2" | "torch._utils._rebuild_tensor" => {
                self.rebuild_tensor(args)
            }
            "torch._utils._rebuild_parameter"
            | "torch._utils._rebuild_parameter_with_state"
            | "torch.nn.parameter.Parameter" => match args.first() {
                Some(t @ Value::Tensor(_)) => Some(t.clone()),
                _ => None,
            },
            "torch._tensor._rebuild_from_type_v2" => match (args.first(), args.get(2)) {
                (Some(inner), Some(Value::Tuple(id))) => {
                    let inner_args = self.out.items(*id).to_vec();
                    Some(self.call(&inner.clone(), &inner_args))
                }
                _ => None,
            },
            "torch.Size" | "builtins.tuple" => match args.first() {
                Some(v @ Value::Tuple(_)) => Some(v.clone()),
                _ => None,
            },
            "torch.device" => args.first().filter(|v| matches!(v, Value::Str(_))).cloned(),
            "_codecs.encode" => match args.first() {
                Some(Value::Str(s)) => Some(Value::Bytes(s.chars().count() as u64)),
                _ => None,
            },
            _ => None,
        };
        made.unwrap_or(Value::Opaque(name))
    }

    fn rebuild_tensor(&self, args: &[Value]) -> Option<Value> {
        let Some(Value::Storage(storage)) = args.first() else {
            return None;
        };
        let offset = as_u64(args.get(1)?)?;
        let shape = self.u64s(args.get(2)?)?;
        let stride = self.u64s(args.get(3)?)?;
        if shape.len() != stride.len() {
            return None;
        }
        Some(Value::Tensor(Rc::new(TensorValue {
            storage: storage.clone(),
            offset: offset.checked_add(storage.view_offset)?,
            shape,
            stride,
        })))
    }

    fn u64s(&self, v: &Value) -> Option<Vec<u64>> {
        let Value::Tuple(id) = v else { return None };
        self.out.items(*id).iter().map(as_u64).collect()
    }

    fn persistent_load(&self, pid: &Value) -> Value {
        let opaque = || Value::Opaque("persistent id".into());
        let Value::Tuple(id) = pid else {
            return opaque();
        };
        let items = self.out.items(*id);
        let (Some(Value::Str(tag)), Some(Value::Global(kind)), Some(Value::Str(key))) =
            (items.first(), items.get(1), items.get(2))
        else {
            return opaque();
        };
        if &**tag != "storage" {
            return opaque();
        }
        let Some(numel) = items.get(4).and_then(as_u64) else {
            return opaque();
        };
        let (key, view_offset) = match (self.persistent, items.get(5)) {
            (Persistent::Legacy, Some(Value::Tuple(view))) => {
                // (view_key, offset, view_size): the view's elements are the
                // root storage's from `offset`.
                let view = self.out.items(*view);
                match view.get(1).and_then(as_u64) {
                    Some(offset) => (key.clone(), offset),
                    None => return opaque(),
                }
            }
            _ => (key.clone(), 0),
        };
        let kind = kind.strip_prefix("torch.").unwrap_or(kind);
        Value::Storage(StorageRef {
            key,
            kind: kind.into(),
            numel,
            view_offset,
        })
    }
}

fn as_u64(v: &Value) -> Option<u64> {
    match v {
        Value::Int(i) => u64::try_from(*i).ok(),
        _ => None,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_small_dict_and_records_a_global_it_never_calls() {
        // {'a': 1, 'b': os.system('x')} as protocol 2, by hand.
        let mut p = vec![0x80, 2, b'}', b'('];
        p.extend_from_slice(b"X\x01\x00\x00\x00aK\x01");
        p.extend_from_slice(b"X\x01\x00\x00\x00bcos\nsystem\nX\x01\x00\x00\x00x\x85R");
        p.extend_from_slice(b"u.");
        let u = unpickle(&p, Persistent::Zip).unwrap();
        assert_eq!(u.globals, vec!["os.system".to_owned()]);
        let Some(Value::Dict(id)) = u.root else {
            panic!("not a dict")
        };
        let pairs = u.pairs(id);
        assert_eq!(pairs[0], (Value::Str("a".into()), Value::Int(1)));
        assert_eq!(pairs[1].1, Value::Opaque("os.system".into()));
    }

    #[test]
    fn refuses_truncated_and_unknown_and_unbalanced_pickles() {
        assert!(matches!(
            unpickle(b"\x80\x02X\x05\x00\x00\x00ab", Persistent::Zip),
            Err(PickleError::Truncated(_))
        ));
        assert!(matches!(
            unpickle(b"\x80\x02\xff", Persistent::Zip),
            Err(PickleError::UnknownOpcode { opcode: 0xff, .. })
        ));
        assert!(matches!(
            unpickle(b"\x80\x02N", Persistent::Zip),
            Err(PickleError::NoStop)
        ));
        assert!(matches!(
            unpickle(b"\x80\x02(t0.", Persistent::Zip),
            Err(PickleError::Malformed { .. })
        ));
        assert!(matches!(
            unpickle(b"h\x05.", Persistent::Zip),
            Err(PickleError::Malformed { .. })
        ));
        // A string longer than the bound.
        assert!(matches!(
            unpickle(b"\x8d\xff\xff\xff\xff\xff\xff\xff\x7f", Persistent::Zip),
            Err(PickleError::Bound(_))
        ));
    }

    #[test]
    fn long1_reads_signed_little_endian() {
        let u = unpickle(b"\x8a\x02\xff\x7f.", Persistent::Zip).unwrap();
        assert_eq!(u.root, Some(Value::Int(0x7fff)));
        let u = unpickle(b"\x8a\x01\xff.", Persistent::Zip).unwrap();
        assert_eq!(u.root, Some(Value::Int(-1)));
    }
}
