//! Memory a transfer reads from or writes into: the traits that vouch for a
//! region, and the owned buffer types.

use crate::pipeline::Memory;
use std::alloc::Layout;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// A description of `len` bytes of memory: host (CPU-addressable) or device.
/// Only a description: what makes it safe to hand to the engine is the
/// [`IoBuf`] / [`IoBufMut`] implementation that returns it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    pub(crate) mem: Memory,
    pub(crate) len: usize,
}

impl Region {
    /// `len` bytes of CPU-addressable memory at `ptr` (pageable, pinned or managed).
    pub fn host(ptr: *const u8, len: usize) -> Region {
        Region {
            mem: Memory::Host(ptr as usize),
            len,
        }
    }

    /// `len` bytes of memory of GPU `device` at device address `ptr`.
    pub fn device(ptr: u64, len: usize, device: i32) -> Region {
        Region {
            mem: Memory::Device { ptr, device },
            len,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn is_device(&self) -> bool {
        self.mem.is_device()
    }

    /// The engine's description of where the bytes start.
    pub fn memory(&self) -> Memory {
        self.mem
    }
}

/// Memory a write may read from.
///
/// # Safety
/// [`IoBuf::io_region`] must describe memory that is readable for its whole
/// length — host memory the CPU can read, or device memory of the named
/// device — and that stays so, unchanged by anyone else, for as long as the
/// borrow it was taken through lasts. A value given to an asynchronous call
/// (by value, `'static`) must keep the region valid until the value is
/// dropped, wherever it is moved to: the bytes must not live inside the value
/// itself (a `Vec`'s heap allocation qualifies; an array on the stack does not).
pub unsafe trait IoBuf {
    fn io_region(&self) -> Region;
}

/// Memory a read may write into.
///
/// # Safety
/// As for [`IoBuf`], and the region must be writable and not read or written
/// by anyone else while a transfer runs. Any byte pattern must be a valid
/// value of whatever the memory holds (plain data, not references).
pub unsafe trait IoBufMut: IoBuf {
    fn io_region_mut(&mut self) -> Region;
}

// SAFETY: a shared slice is readable for its length while borrowed.
unsafe impl IoBuf for [u8] {
    fn io_region(&self) -> Region {
        Region::host(self.as_ptr(), self.len())
    }
}

// SAFETY: an exclusive slice is writable, and u8 takes any byte.
unsafe impl IoBufMut for [u8] {
    fn io_region_mut(&mut self) -> Region {
        Region::host(self.as_mut_ptr(), self.len())
    }
}

// SAFETY: the bytes are on the heap; moving the Vec does not move them.
unsafe impl IoBuf for Vec<u8> {
    fn io_region(&self) -> Region {
        self.as_slice().io_region()
    }
}

// SAFETY: as above; `len` bytes are initialised and owned by the Vec.
unsafe impl IoBufMut for Vec<u8> {
    fn io_region_mut(&mut self) -> Region {
        self.as_mut_slice().io_region_mut()
    }
}

// SAFETY: the bytes are on the heap; moving the Box does not move them.
unsafe impl IoBuf for Box<[u8]> {
    fn io_region(&self) -> Region {
        (**self).io_region()
    }
}

// SAFETY: as above.
unsafe impl IoBufMut for Box<[u8]> {
    fn io_region_mut(&mut self) -> Region {
        (**self).io_region_mut()
    }
}

// SAFETY: the reference keeps `T`'s region borrowed (and so valid) while it lives.
unsafe impl<T: IoBuf + ?Sized> IoBuf for &T {
    fn io_region(&self) -> Region {
        (**self).io_region()
    }
}

// SAFETY: as above.
unsafe impl<T: IoBuf + ?Sized> IoBuf for &mut T {
    fn io_region(&self) -> Region {
        (**self).io_region()
    }
}

// SAFETY: the exclusive reference keeps `T`'s region exclusively borrowed.
unsafe impl<T: IoBufMut + ?Sized> IoBufMut for &mut T {
    fn io_region_mut(&mut self) -> Region {
        (**self).io_region_mut()
    }
}

/// Alignment of a [`HostBuffer`]: the DIO memory alignment of every common
/// filesystem and block device, so that an aligned read can go O_DIRECT
/// straight into the buffer instead of through a bounce slot.
pub const HOST_BUFFER_ALIGN: usize = 4096;

/// An owned, zero-initialised, 4 KiB-aligned host buffer.
///
/// ```
/// use hipfile_engine::HostBuffer;
/// let mut b = HostBuffer::new(8192);
/// assert_eq!(b.len(), 8192);
/// assert_eq!(b.as_ptr() as usize % 4096, 0);
/// b[0] = 7;
/// assert_eq!(&b[..2], &[7, 0]);
/// ```
pub struct HostBuffer {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the buffer owns its allocation exclusively, like a Vec<u8>.
unsafe impl Send for HostBuffer {}
// SAFETY: shared access only reads, like a Vec<u8>.
unsafe impl Sync for HostBuffer {}

impl HostBuffer {
    /// A buffer of `len` zero bytes. Aborts like `Vec` when memory runs out.
    pub fn new(len: usize) -> HostBuffer {
        if len == 0 {
            return HostBuffer {
                ptr: NonNull::<[u8; HOST_BUFFER_ALIGN]>::dangling().cast(),
                len: 0,
            };
        }
        let layout = Self::layout(len);
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(p) else {
            std::alloc::handle_alloc_error(layout)
        };
        HostBuffer { ptr, len }
    }

    fn layout(len: usize) -> Layout {
        Layout::from_size_align(len, HOST_BUFFER_ALIGN).expect("buffer length overflows isize")
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

impl Drop for HostBuffer {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: allocated in `new` with this layout, freed once.
            unsafe { std::alloc::dealloc(self.ptr.as_ptr(), Self::layout(self.len)) };
        }
    }
}

impl Deref for HostBuffer {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `len` initialised bytes owned by self (dangling is fine for 0).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for HostBuffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, borrowed exclusively through `&mut self`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl std::fmt::Debug for HostBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostBuffer")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .finish()
    }
}

// SAFETY: heap memory owned by the buffer; moving the buffer does not move it.
unsafe impl IoBuf for HostBuffer {
    fn io_region(&self) -> Region {
        Region::host(self.as_ptr(), self.len)
    }
}

// SAFETY: as above, and writable; the bytes are plain u8.
unsafe impl IoBufMut for HostBuffer {
    fn io_region_mut(&mut self) -> Region {
        Region::host(self.as_mut_ptr(), self.len)
    }
}

/// A range of GPU memory the engine may read into or write from. It does not
/// own the memory: whoever allocated it frees it, after the last transfer.
///
/// ```
/// # use std::sync::Arc;
/// use hipfile_engine::gpu::{testgpu::TestGpu, Gpu};
/// use hipfile_engine::{Config, DeviceSlice, Engine, OpenMode};
/// # let path = std::env::temp_dir().join(format!("hipfile-doc-dev-{}", std::process::id()));
/// std::fs::write(&path, b"device bytes").unwrap();
/// // The test double stands in for a GPU runtime here.
/// let gpu = Arc::new(TestGpu::new(1));
/// let cfg = Config { io_threads: 2, ..Config::default() };
/// let engine = Engine::with_gpu(cfg, gpu.clone()).unwrap();
/// let ptr = gpu.device_alloc(0, 12).unwrap();
/// // SAFETY: `ptr` is a 12-byte allocation on device 0, freed only below.
/// let mut dev = unsafe { DeviceSlice::from_raw(ptr, 12, 0) };
/// let f = engine.open(&path, OpenMode::Read).unwrap();
/// assert_eq!(f.read(&mut dev, 0).unwrap(), 12);
/// assert_eq!(gpu.read_device(ptr, 12), b"device bytes");
/// // SAFETY: no transfer uses the allocation any more.
/// unsafe { gpu.device_free(ptr) }.unwrap();
/// # std::fs::remove_file(&path).unwrap();
/// ```
#[derive(Debug, PartialEq, Eq)]
pub struct DeviceSlice {
    ptr: u64,
    len: usize,
    device: i32,
}

impl DeviceSlice {
    /// Describe `len` bytes of device memory at `ptr` on GPU `device`.
    ///
    /// # Safety
    /// `[ptr, ptr + len)` must lie in one live allocation of `device` that is
    /// not freed while this value (or one split from it) exists, and no other
    /// code may read or write that range while a transfer into or from it
    /// runs. The engine checks the range against the runtime's allocation
    /// table before each transfer, so a stale or wrong pointer gives an error
    /// where the runtime can tell; it cannot tell a freed range that was
    /// reallocated.
    pub unsafe fn from_raw(ptr: u64, len: usize, device: i32) -> DeviceSlice {
        DeviceSlice { ptr, len, device }
    }

    pub fn as_raw(&self) -> u64 {
        self.ptr
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn device(&self) -> i32 {
        self.device
    }

    /// Two slices, `[0, mid)` and `[mid, len)`; `mid` is clamped to the length.
    pub fn split_at(self, mid: usize) -> (DeviceSlice, DeviceSlice) {
        let mid = mid.min(self.len);
        let head = DeviceSlice {
            ptr: self.ptr,
            len: mid,
            device: self.device,
        };
        let tail = DeviceSlice {
            ptr: self.ptr + mid as u64,
            len: self.len - mid,
            device: self.device,
        };
        (head, tail)
    }
}

// SAFETY: `from_raw`'s caller vouched for the range for the life of the value.
unsafe impl IoBuf for DeviceSlice {
    fn io_region(&self) -> Region {
        Region::device(self.ptr, self.len, self.device)
    }
}

// SAFETY: as above; device bytes are plain data.
unsafe impl IoBufMut for DeviceSlice {
    fn io_region_mut(&mut self) -> Region {
        Region::device(self.ptr, self.len, self.device)
    }
}
