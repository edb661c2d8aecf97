//! Region memory that costs only what is used: [`SparseMemory`].
//!
//! A simulated run with thousands of QPs registers several buffers per QP end, most of which
//! hold, at any moment, nothing but their initial contents: receive buffers full of canary
//! bytes, scratch rings between messages, target regions full of seeded random bytes that
//! only a few WRITEs ever change. Storing all of that made a QP end cost about 230 KB. Here a
//! region is a *background* — a fill byte, or the byte stream of a seeded generator, computed
//! on demand — plus the 4 KiB pages that differ from it. Writing the background back over a
//! page (refilling a receive buffer with canaries) or [`discarding`](SparseMemory::discard) a
//! range (a scratch ring freeing finished messages) drops pages again, so memory follows what
//! the queues hold. Contents are exactly what a `Vec` would hold, byte for byte: the engine
//! cannot tell the difference, and a seed replays the same run.

use std::sync::{Mutex, MutexGuard};

use softrdma_proto::{MemoryFault, RegionMemory};

use crate::rng::SimRng;

/// Bytes per page.
pub const PAGE: usize = 4096;

/// What a region holds where nothing was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Background {
    /// One byte everywhere.
    Fill(u8),
    /// The bytes [`SimRng::fill_bytes`] would produce from this generator state.
    Stream(SimRng),
}

impl Background {
    /// The background of page `index` into `page`.
    fn page(&self, index: usize, page: &mut [u8]) {
        match self {
            Background::Fill(b) => page.fill(*b),
            Background::Stream(rng) => {
                let mut r = rng.clone();
                for _ in 0..index * PAGE / 8 {
                    r.next_u64();
                }
                r.fill_bytes(page);
            }
        }
    }
}

/// A region's bytes: a background and the pages that differ from it (see the module docs).
#[derive(Debug)]
pub struct SparseMemory {
    len: usize,
    background: Background,
    pages: Mutex<Vec<Option<Box<[u8]>>>>,
}

impl SparseMemory {
    /// `len` bytes of `background`.
    pub fn new(len: usize, background: Background) -> SparseMemory {
        SparseMemory {
            len,
            background,
            pages: Mutex::new((0..len.div_ceil(PAGE)).map(|_| None).collect()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Option<Box<[u8]>>>> {
        self.pages.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What the region holds where nothing was written.
    pub fn background(&self) -> &Background {
        &self.background
    }

    /// Pages held in memory.
    pub fn resident_pages(&self) -> usize {
        self.lock().iter().filter(|p| p.is_some()).count()
    }

    /// A copy of the whole contents.
    pub fn snapshot(&self) -> Vec<u8> {
        let mut v = vec![0; self.len];
        self.read(0, &mut v);
        v
    }

    /// Returns `[offset, offset + len)` to the background (what nobody will read before
    /// writing it again): pages wholly inside the range are dropped, the partial pages at its
    /// ends rewritten.
    pub fn discard(&self, offset: usize, len: usize) {
        let end = (offset + len).min(self.len);
        let mut at = offset;
        let mut pages = self.lock();
        let mut scratch = vec![0u8; PAGE];
        while at < end {
            let p = at / PAGE;
            let in_page = at % PAGE;
            let n = (PAGE - in_page).min(end - at);
            if n == PAGE || (in_page == 0 && at + n == self.len) {
                pages[p] = None;
            } else if let Some(page) = pages[p].as_mut() {
                self.background.page(p, &mut scratch);
                page[in_page..in_page + n].copy_from_slice(&scratch[in_page..in_page + n]);
            }
            at += n;
        }
    }

    /// The length of page `p` (the last one may be short).
    fn page_len(&self, p: usize) -> usize {
        (self.len - p * PAGE).min(PAGE)
    }
}

/// Plain memory cannot fault: infallible, for callers that hold the concrete type.
impl SparseMemory {
    /// Copies `dst.len()` bytes starting at `offset` into `dst`.
    pub fn read(&self, offset: usize, dst: &mut [u8]) {
        let pages = self.lock();
        let mut scratch = Vec::new();
        let mut done = 0;
        while done < dst.len() {
            let at = offset + done;
            let (p, in_page) = (at / PAGE, at % PAGE);
            let n = (PAGE - in_page).min(dst.len() - done);
            match &pages[p] {
                Some(page) => dst[done..done + n].copy_from_slice(&page[in_page..in_page + n]),
                None => {
                    scratch.resize(self.page_len(p), 0);
                    self.background.page(p, &mut scratch);
                    dst[done..done + n].copy_from_slice(&scratch[in_page..in_page + n]);
                }
            }
            done += n;
        }
    }

    /// Copies `src` into the memory starting at `offset`.
    pub fn write(&self, offset: usize, src: &[u8]) {
        let mut pages = self.lock();
        let mut done = 0;
        while done < src.len() {
            let at = offset + done;
            let (p, in_page) = (at / PAGE, at % PAGE);
            let n = (PAGE - in_page).min(src.len() - done);
            let piece = &src[done..done + n];
            let fill = match self.background {
                Background::Fill(b) if piece.iter().all(|&x| x == b) => Some(b),
                _ => None,
            };
            let mut back_to_background = false;
            match (&mut pages[p], fill) {
                // Writing the background over the background: nothing to keep.
                (None, Some(_)) => {}
                (Some(page), Some(b)) => {
                    page[in_page..in_page + n].copy_from_slice(piece);
                    back_to_background = page.iter().all(|&x| x == b);
                }
                (slot, _) => {
                    let page = slot.get_or_insert_with(|| {
                        let mut page = vec![0u8; self.page_len(p)].into_boxed_slice();
                        self.background.page(p, &mut page);
                        page
                    });
                    page[in_page..in_page + n].copy_from_slice(piece);
                }
            }
            if back_to_background {
                pages[p] = None;
            }
            done += n;
        }
    }

    /// [`RegionMemory::compare_swap`], infallible.
    pub fn compare_swap(&self, offset: usize, compare: u64, swap: u64) -> u64 {
        // The engine runs on one thread; the lock is per call, which is enough here.
        let mut w = [0u8; 8];
        self.read(offset, &mut w);
        let orig = u64::from_ne_bytes(w);
        if orig == compare {
            self.write(offset, &swap.to_ne_bytes());
        }
        orig
    }

    /// [`RegionMemory::fetch_add`], infallible.
    pub fn fetch_add(&self, offset: usize, add: u64) -> u64 {
        let mut w = [0u8; 8];
        self.read(offset, &mut w);
        let orig = u64::from_ne_bytes(w);
        self.write(offset, &orig.wrapping_add(add).to_ne_bytes());
        orig
    }
}

impl RegionMemory for SparseMemory {
    fn len(&self) -> usize {
        self.len
    }
    fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), MemoryFault> {
        SparseMemory::read(self, offset, dst);
        Ok(())
    }
    fn write(&self, offset: usize, src: &[u8]) -> Result<(), MemoryFault> {
        SparseMemory::write(self, offset, src);
        Ok(())
    }
    fn compare_swap(&self, offset: usize, compare: u64, swap: u64) -> Result<u64, MemoryFault> {
        Ok(SparseMemory::compare_swap(self, offset, compare, swap))
    }
    fn fetch_add(&self, offset: usize, add: u64) -> Result<u64, MemoryFault> {
        Ok(SparseMemory::fetch_add(self, offset, add))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn behaves_like_a_vec_and_keeps_only_what_differs() {
        let rng = SimRng::new(9);
        let len = 3 * PAGE + 123;
        let mut expect = vec![0u8; len];
        rng.clone().fill_bytes(&mut expect);
        let m = SparseMemory::new(len, Background::Stream(rng));
        assert_eq!(m.snapshot(), expect);
        assert_eq!(m.resident_pages(), 0);
        m.write(PAGE - 2, &[1, 2, 3, 4]);
        expect[PAGE - 2..PAGE + 2].copy_from_slice(&[1, 2, 3, 4]);
        assert_eq!(m.snapshot(), expect);
        assert_eq!(m.resident_pages(), 2);
        assert_eq!(m.fetch_add(3 * PAGE + 8, 5), {
            let mut w = [0u8; 8];
            w.copy_from_slice(&expect[3 * PAGE + 8..3 * PAGE + 16]);
            u64::from_ne_bytes(w)
        });
        m.discard(0, len);
        assert_eq!(m.resident_pages(), 0);
        let mut fresh = vec![0u8; len];
        SimRng::new(9).fill_bytes(&mut fresh);
        assert_eq!(m.snapshot(), fresh);

        let c = SparseMemory::new(2 * PAGE, Background::Fill(0xee));
        c.write(10, &[0xee; 100]);
        assert_eq!(c.resident_pages(), 0, "background over background");
        c.write(10, &[1; 100]);
        assert_eq!(c.resident_pages(), 1);
        c.write(10, &[0xee; 100]);
        assert_eq!(c.resident_pages(), 0, "back to the background");
        c.write(PAGE + 5, &[2; 10]);
        c.discard(PAGE + 5, 3);
        let mut b = [0u8; 10];
        c.read(PAGE + 5, &mut b);
        assert_eq!(b, [0xee, 0xee, 0xee, 2, 2, 2, 2, 2, 2, 2]);
    }
}
