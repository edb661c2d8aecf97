//! What a namespace stores its blocks in: memory (sparse, allocated on first write, freed
//! on deallocation) or a file (or block device), behind the [`Backend`] trait so the
//! controller logic does not care which. Every call is bounds-checked by the controller
//! before it gets here; a backend still refuses a range past its end instead of panicking.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use rustix::fs::{fallocate, FallocateFlags};

/// A namespace's storage.
pub trait Backend: Send + Sync + std::fmt::Debug {
    /// Its size in bytes.
    fn size(&self) -> u64;
    /// Fills `buf` from `offset`.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()>;
    /// Stores `data` at `offset`.
    fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()>;
    /// Makes earlier writes durable (the volatile write cache's flush).
    fn flush(&self) -> io::Result<()>;
    /// Zeroes `len` bytes at `offset`.
    fn write_zeroes(&self, offset: u64, len: u64) -> io::Result<()>;
    /// Drops `len` bytes at `offset`: they read as zeros afterwards (the namespace
    /// advertises DLFEAT 001b), and their storage may be given back.
    fn deallocate(&self, offset: u64, len: u64) -> io::Result<()>;
}

fn check_range(size: u64, offset: u64, len: u64) -> io::Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "range past the end of the namespace",
        )),
    }
}

/// Bytes per chunk of a memory namespace.
const CHUNK: u64 = 1 << 20;

/// A namespace in memory: 1 MiB chunks, each allocated on its first write and freed when
/// deallocated whole, so `--size 1T` costs only what is written. Each chunk has its own
/// lock: I/O queues on other threads touching other chunks do not wait for each other.
#[derive(Debug)]
pub struct MemoryBackend {
    size: u64,
    chunks: Vec<Mutex<Option<Box<[u8]>>>>,
}

impl MemoryBackend {
    /// A zeroed namespace of `size` bytes.
    pub fn new(size: u64) -> MemoryBackend {
        let n = size.div_ceil(CHUNK);
        MemoryBackend {
            size,
            chunks: (0..n).map(|_| Mutex::new(None)).collect(),
        }
    }

    fn chunk(&self, i: u64) -> MutexGuard<'_, Option<Box<[u8]>>> {
        let m = &self.chunks[usize::try_from(i)
            .unwrap_or(usize::MAX)
            .min(self.chunks.len() - 1)];
        m.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Calls `f(chunk index, offset in chunk, range of the caller's buffer)` for each chunk
    /// `[offset, offset + len)` touches.
    fn each(&self, offset: u64, len: u64, mut f: impl FnMut(u64, usize, std::ops::Range<usize>)) {
        let mut done = 0u64;
        while done < len {
            let at = offset + done;
            let (i, within) = (at / CHUNK, at % CHUNK);
            let n = (CHUNK - within).min(len - done);
            f(i, within as usize, done as usize..(done + n) as usize);
            done += n;
        }
    }

    /// Bytes of memory the namespace holds now.
    pub fn allocated(&self) -> u64 {
        (0..self.chunks.len() as u64)
            .filter(|&i| self.chunk(i).is_some())
            .count() as u64
            * CHUNK
    }
}

impl Backend for MemoryBackend {
    fn size(&self) -> u64 {
        self.size
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        check_range(self.size, offset, buf.len() as u64)?;
        self.each(offset, buf.len() as u64, |i, within, r| {
            let dst = &mut buf[r];
            match &*self.chunk(i) {
                Some(c) => dst.copy_from_slice(&c[within..within + dst.len()]),
                None => dst.fill(0),
            }
        });
        Ok(())
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        check_range(self.size, offset, data.len() as u64)?;
        self.each(offset, data.len() as u64, |i, within, r| {
            let src = &data[r];
            let mut c = self.chunk(i);
            let c = c.get_or_insert_with(|| vec![0u8; CHUNK as usize].into_boxed_slice());
            c[within..within + src.len()].copy_from_slice(src);
        });
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        Ok(())
    }

    fn write_zeroes(&self, offset: u64, len: u64) -> io::Result<()> {
        self.deallocate(offset, len)
    }

    fn deallocate(&self, offset: u64, len: u64) -> io::Result<()> {
        check_range(self.size, offset, len)?;
        self.each(offset, len, |i, within, r| {
            let mut c = self.chunk(i);
            if r.len() as u64 == CHUNK {
                *c = None;
            } else if let Some(c) = c.as_mut() {
                c[within..within + r.len()].fill(0);
            }
        });
        Ok(())
    }
}

/// A namespace in a file (or a block device): positioned reads and writes, `fdatasync` for
/// a flush, and `fallocate` to zero and to punch holes (writing zeros where the file system
/// cannot).
#[derive(Debug)]
pub struct FileBackend {
    file: File,
    size: u64,
    /// `fallocate` works here; cleared at its first refusal.
    fallocate_ok: AtomicBool,
}

impl FileBackend {
    /// Opens `path` read-write; `size` creates or extends a regular file to that many bytes
    /// (without it, the file's or device's current size).
    pub fn open(path: &Path, size: Option<u64>) -> io::Result<FileBackend> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(size.is_some())
            .truncate(false)
            .open(path)?;
        if let Some(size) = size {
            if file.metadata()?.len() < size {
                file.set_len(size)?;
            }
        }
        // A block device's metadata says 0 bytes: seek to its end instead.
        let size = match file.metadata()?.len() {
            0 => io::Seek::seek(&mut &file, io::SeekFrom::End(0))?,
            n => size.unwrap_or(n),
        };
        Ok(FileBackend {
            file,
            size,
            fallocate_ok: AtomicBool::new(true),
        })
    }

    fn zero_by_writing(&self, offset: u64, len: u64) -> io::Result<()> {
        let zeros = vec![0u8; (len.min(1 << 20)) as usize];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(zeros.len() as u64) as usize;
            self.file.write_all_at(&zeros[..n], offset + done)?;
            done += n as u64;
        }
        Ok(())
    }

    fn try_fallocate(&self, flags: FallocateFlags, offset: u64, len: u64) -> io::Result<()> {
        if self.fallocate_ok.load(Ordering::Relaxed) {
            match fallocate(&self.file, flags | FallocateFlags::KEEP_SIZE, offset, len) {
                Ok(()) => return Ok(()),
                Err(e) => {
                    tracing::debug!("fallocate {flags:?}: {e}; zeroing by writes from now on");
                    self.fallocate_ok.store(false, Ordering::Relaxed);
                }
            }
        }
        self.zero_by_writing(offset, len)
    }
}

impl Backend for FileBackend {
    fn size(&self) -> u64 {
        self.size
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        check_range(self.size, offset, buf.len() as u64)?;
        self.file.read_exact_at(buf, offset)
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        check_range(self.size, offset, data.len() as u64)?;
        self.file.write_all_at(data, offset)
    }

    fn flush(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn write_zeroes(&self, offset: u64, len: u64) -> io::Result<()> {
        check_range(self.size, offset, len)?;
        self.try_fallocate(FallocateFlags::ZERO_RANGE, offset, len)
    }

    fn deallocate(&self, offset: u64, len: u64) -> io::Result<()> {
        check_range(self.size, offset, len)?;
        self.try_fallocate(FallocateFlags::PUNCH_HOLE, offset, len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exercise(b: &dyn Backend) {
        let size = b.size();
        assert_eq!(size, 3 * CHUNK + 4096);
        // A write across a chunk boundary reads back.
        let data: Vec<u8> = (0..8192u32).map(|i| (i % 251) as u8).collect();
        b.write_at(CHUNK - 4096, &data).unwrap();
        let mut back = vec![0u8; 8192];
        b.read_at(CHUNK - 4096, &mut back).unwrap();
        assert_eq!(back, data);
        // Zeroes and deallocation read as zeros, around data that stays.
        b.write_zeroes(CHUNK - 1024, 512).unwrap();
        b.deallocate(CHUNK, 4096).unwrap();
        b.read_at(CHUNK - 4096, &mut back).unwrap();
        assert_eq!(back[..3072], data[..3072]);
        assert!(back[3072..3584].iter().all(|&x| x == 0));
        assert_eq!(back[3584..4096], data[3584..4096]);
        assert!(back[4096..].iter().all(|&x| x == 0));
        // The last bytes are reachable, one more is not.
        b.write_at(size - 1, &[9]).unwrap();
        assert!(b.write_at(size, &[9]).is_err());
        assert!(b.read_at(size - 1, &mut [0, 0]).is_err());
        assert!(b.deallocate(u64::MAX, 2).is_err(), "no overflow");
        b.flush().unwrap();
    }

    #[test]
    fn test_memory_backend() {
        let m = MemoryBackend::new(3 * CHUNK + 4096);
        assert_eq!(m.allocated(), 0);
        exercise(&m);
        // A whole chunk deallocated gives its memory back.
        m.write_at(2 * CHUNK, &[1]).unwrap();
        let before = m.allocated();
        m.deallocate(2 * CHUNK, CHUNK).unwrap();
        assert_eq!(m.allocated(), before - CHUNK);
    }

    #[test]
    fn test_file_backend() {
        let dir = std::env::temp_dir().join(format!("softrdma-nvmf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("ns.img");
        let f = FileBackend::open(&path, Some(3 * CHUNK + 4096)).unwrap();
        exercise(&f);
        drop(f);
        // Reopened without a size: the file's.
        let f = FileBackend::open(&path, None).unwrap();
        assert_eq!(f.size(), 3 * CHUNK + 4096);
        let mut one = [0u8];
        f.read_at(f.size() - 1, &mut one).unwrap();
        assert_eq!(one, [9]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
