//! Where a torch file's bytes come from: this machine's file, or another
//! [`Source`] read in blocks through a small cache.

/// Where a torch file's bytes are read: a file on this machine, or a
/// remote one by range requests.
pub trait Source {
    /// The file's size in bytes.
    ///
    /// # Errors
    /// The source's failure, as an I/O error.
    fn size(&self) -> std::io::Result<u64>;
    /// The bytes `range` (fewer only at the end of the file).
    ///
    /// # Errors
    /// The source's failure, as an I/O error.
    fn read_at(&self, range: std::ops::Range<u64>) -> std::io::Result<Vec<u8>>;
    /// Whether a read costs little (a local file): the zip's local headers
    /// are then read for each storage rather than predicted.
    fn is_local(&self) -> bool {
        false
    }
}

/// A file on this machine as a [`Source`].
pub(super) struct LocalFile(pub(super) std::fs::File, pub(super) u64);

impl Source for LocalFile {
    fn size(&self) -> std::io::Result<u64> {
        Ok(self.1)
    }

    fn read_at(&self, range: std::ops::Range<u64>) -> std::io::Result<Vec<u8>> {
        use std::os::unix::fs::FileExt as _;
        let end = range.end.min(self.1);
        let mut bytes = vec![0; usize::try_from(end.saturating_sub(range.start)).unwrap_or(0)];
        self.0.read_exact_at(&mut bytes, range.start)?;
        Ok(bytes)
    }

    fn is_local(&self) -> bool {
        true
    }
}

/// Bytes a block of [`SourceReader`].
pub(super) const BLOCK_BYTES: u64 = 256 << 10;

/// Blocks a [`SourceReader`] keeps.
pub(super) const KEPT_BLOCKS: usize = 64;

/// A [`Source`] read and sought as the zip reader wants, a block at a time,
/// the last blocks kept: the central directory at the end and `data.pkl`
/// at the start cost a request or two each.
pub(super) struct SourceReader<'a> {
    source: &'a dyn Source,
    size: u64,
    pos: u64,
    blocks: Vec<(u64, Vec<u8>)>,
}

impl<'a> SourceReader<'a> {
    /// A reader of the `size` bytes of `source`, from its start.
    pub(super) fn new(source: &'a dyn Source, size: u64) -> Self {
        Self {
            source,
            size,
            pos: 0,
            blocks: Vec::new(),
        }
    }
}

impl SourceReader<'_> {
    fn block(&mut self, index: u64) -> std::io::Result<&[u8]> {
        if let Some(k) = self.blocks.iter().position(|(i, _)| *i == index) {
            return Ok(&self.blocks[k].1);
        }
        let start = index * BLOCK_BYTES;
        let bytes = self
            .source
            .read_at(start..(start + BLOCK_BYTES).min(self.size))?;
        if self.blocks.len() >= KEPT_BLOCKS {
            self.blocks.remove(0);
        }
        self.blocks.push((index, bytes));
        Ok(&self.blocks[self.blocks.len() - 1].1)
    }
}

impl std::io::Read for SourceReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.pos >= self.size || buf.is_empty() {
            return Ok(0);
        }
        let index = self.pos / BLOCK_BYTES;
        let within = usize::try_from(self.pos % BLOCK_BYTES).unwrap_or(0);
        let block = self.block(index)?;
        let available = block.get(within..).unwrap_or_default();
        let n = available.len().min(buf.len());
        if n == 0 {
            return Ok(0);
        }
        buf[..n].copy_from_slice(&available[..n]);
        self.pos += n as u64;
        Ok(n)
    }
}

impl std::io::Seek for SourceReader<'_> {
    fn seek(&mut self, to: std::io::SeekFrom) -> std::io::Result<u64> {
        self.pos = sought(self.pos, Some(self.size), to)?;
        Ok(self.pos)
    }
}

/// Where a seek `to` from `pos` lands in a reader of `size` bytes (none:
/// not known yet, so no seek from the end); an error for a place before
/// the start or past what a position can hold.
///
/// # Errors
/// As said.
pub(crate) fn sought(pos: u64, size: Option<u64>, to: std::io::SeekFrom) -> std::io::Result<u64> {
    match to {
        std::io::SeekFrom::Start(n) => Some(n),
        std::io::SeekFrom::Current(d) => pos.checked_add_signed(d),
        std::io::SeekFrom::End(d) => size.and_then(|size| size.checked_add_signed(d)),
    }
    .ok_or_else(|| std::io::Error::other("seek out of the file"))
}
