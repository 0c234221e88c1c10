//! Driver state behind the C API (spec §5.1): the reference count, the
//! registered files, buffers and streams, the parameter table, and the engine
//! that exists while the count is above zero.
//!
//! One reader–writer lock guards the maps (shared for lookups, exclusive for
//! changes); I/O holds no lock: it clones the `Arc`s it needs.

use crate::batch::Batch;
use crate::config::{Config, Params};
use crate::error::{Error, OpError, Result};
use crate::file::File;
use crate::gpu::{self, Gpu, MemKind, PtrInfo};
use crate::pipeline::{Engine, Memory};
use crate::{log_info, log_warn};
use std::collections::{BTreeMap, HashMap};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// A registered buffer (`hipFileBufRegister`).
#[derive(Debug)]
pub struct BufferReg {
    pub base: u64,
    pub len: u64,
    pub flags: i32,
    pub info: PtrInfo,
    /// I/O operations using it right now (deregistration refuses while > 0).
    pub inflight: AtomicUsize,
}

/// A buffer as one I/O sees it: registered or temporary.
#[derive(Clone, Debug)]
pub struct ResolvedBuffer {
    pub mem: Memory,
    /// Bytes usable from the pointer on (registered length, or allocation end − ptr).
    pub len: u64,
    pub info: PtrInfo,
    pub reg: Option<Arc<BufferReg>>,
}

/// The registry's answer for one I/O call ([`Driver::lookup_io`]).
pub struct IoLookup {
    pub engine: Option<Engine>,
    pub file: Option<Arc<File>>,
    pub buffer: Option<Arc<BufferReg>>,
}

/// A registered stream (`hipFileStreamRegister`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamReg {
    pub flags: u32,
    pub device: i32,
}

#[derive(Default)]
pub struct State {
    pub refcount: i64,
    pub engine: Option<Engine>,
    pub files: HashMap<usize, Arc<File>>,
    pub fd_to_handle: HashMap<RawFd, usize>,
    pub buffers: BTreeMap<u64, Arc<BufferReg>>,
    pub streams: HashMap<usize, StreamReg>,
    pub batches: HashMap<usize, Arc<Batch>>,
    pub params: Params,
    /// A DriverSet* call while closed locks Set*Parameter until an open/close cycle.
    pub params_locked: bool,
}

pub struct Driver {
    state: RwLock<State>,
    gpu: OnceLock<Arc<dyn Gpu>>,
    env: OnceLock<Config>,
    /// Tests can run the driver over another runtime (the test double).
    gpu_override: RwLock<Option<Arc<dyn Gpu>>>,
    /// Tests can put a fault plan on the rings of the next engine.
    #[cfg(feature = "testing")]
    faults: RwLock<Option<crate::worker::FaultFactory>>,
}

/// One driver per process: a child after `fork()` starts from a fresh,
/// closed driver (the parent's threads, rings and locks are not there; its
/// state is left untouched, see [`crate::fork`]).
static DRIVER: crate::fork::PerProcess<Driver> = crate::fork::PerProcess::new();

/// A new handle value for a file or batch registration, never handed out
/// before in this process: a handle kept after its deregistration (or
/// destruction) must not name a later registration, so it cannot be the
/// registration's address (the allocator gives a freed address back) or a
/// reused slot. Values count up by 16 from an arbitrary base away from small
/// integers, so neither NULL nor a descriptor number passed by mistake is one.
pub fn new_handle() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    const BASE: usize = 0x4846 << 32;
    BASE + (NEXT.fetch_add(1, Ordering::Relaxed) + 1) * 16
}

/// Times the driver state has been taken to change ([`Driver::write`]), in
/// every driver this process and its parents made (it is not reset in a
/// child after fork).
static MUTATIONS: AtomicU64 = AtomicU64::new(0);

/// [`MUTATIONS`] now. A thread that looked up a handle after reading this
/// count may keep using what it found while the count stays the same.
pub fn mutations() -> u64 {
    MUTATIONS.load(Ordering::Acquire)
}

/// The process-wide driver, created on first use (never at load time).
pub fn driver() -> &'static Driver {
    DRIVER.get_or_init(|| {
        if crate::fork::generation() > 0 {
            log_info!("fresh driver state after fork(): the parent's handles, buffers, streams and engine do not carry over");
        }
        Driver {
            state: RwLock::new(State {
                params: crate::config_file::seeded_params(),
                ..State::default()
            }),
            gpu: OnceLock::new(),
            env: OnceLock::new(),
            gpu_override: RwLock::new(None),
            #[cfg(feature = "testing")]
            faults: RwLock::new(None),
        }
    })
}

impl Driver {
    pub fn read(&self) -> RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(|p| p.into_inner())
    }

    /// The state, to change. Every taker counts as a change ([`mutations`]),
    /// whether it changes anything or not: a thread's remembered answer
    /// ([`crate::fast`]) is then asked again, which is only slower.
    pub fn write(&self) -> RwLockWriteGuard<'_, State> {
        let g = self.state.write().unwrap_or_else(|p| p.into_inner());
        // Under the lock, before any change: a lookup that starts after this
        // writer lets go sees the new count (the unlock releases it), and one
        // that read the old count before a lookup that waited for this
        // writer remembers an answer under a count that is already stale.
        MUTATIONS.fetch_add(1, Ordering::Release);
        g
    }

    /// Settings from the environment, read once per process.
    pub fn env_config(&self) -> &Config {
        self.env.get_or_init(Config::from_env)
    }

    /// The GPU runtime, loaded once per process on first need.
    pub fn gpu(&self) -> Arc<dyn Gpu> {
        if let Some(g) = self
            .gpu_override
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
        {
            return g.clone();
        }
        self.gpu
            .get_or_init(|| {
                let g = gpu::load(self.env_config().gpu_runtime);
                if g.has_devices() {
                    log_info!(
                        "GPU runtime: {} with {} device(s)",
                        g.name(),
                        g.device_count()
                    );
                } else {
                    log_info!("no GPU runtime: host memory only");
                    crate::fork::explain_missing_gpu(g.as_ref());
                }
                g
            })
            .clone()
    }

    /// Use `gpu` instead of the loaded runtime (tests; takes effect at the next open).
    pub fn set_gpu_override(&self, gpu: Option<Arc<dyn Gpu>>) {
        *self.gpu_override.write().unwrap_or_else(|p| p.into_inner()) = gpu;
    }

    /// Fault-inject the rings of engines started from now on (tests only).
    #[cfg(feature = "testing")]
    pub fn set_fault_factory(&self, f: Option<crate::worker::FaultFactory>) {
        *self.faults.write().unwrap_or_else(|p| p.into_inner()) = f;
    }

    fn start_engine(&self, st: &mut State) -> Result<()> {
        if st.engine.is_none() {
            let mut cfg = self.env_config().clone();
            st.params.apply(&mut cfg);
            #[cfg(feature = "testing")]
            let engine = {
                let faults = self.faults.read().unwrap_or_else(|p| p.into_inner());
                Engine::with_faults(cfg, self.gpu(), faults.clone())
            };
            #[cfg(not(feature = "testing"))]
            let engine = Engine::with_gpu(cfg, self.gpu());
            st.engine = Some(engine?);
        }
        Ok(())
    }

    /// `hipFileDriverOpen`: count + 1 (the engine starts at 0 → 1).
    pub fn open(&self) -> Result<()> {
        let mut st = self.write();
        self.start_engine(&mut st)?;
        st.refcount += 1;
        Ok(())
    }

    /// Implicit initialisation: sets the count to 1 if it is 0, never above.
    pub fn implicit_open(&self) -> Result<()> {
        let mut st = self.write();
        self.implicit_open_locked(&mut st)
    }

    fn implicit_open_locked(&self, st: &mut State) -> Result<()> {
        if st.refcount == 0 {
            self.start_engine(st)?;
            st.refcount = 1;
        }
        Ok(())
    }

    /// `hipFileDriverClose`: count − 1; at 0 everything is cleared (buffers, then
    /// files, streams) and the parameters revert to their defaults.
    pub fn close(&self) -> Result<()> {
        let (engine, batches) = {
            let mut st = self.write();
            if st.refcount <= 0 {
                return Err(OpError::DriverNotInitialized.into());
            }
            st.refcount -= 1;
            if st.refcount > 0 {
                return Ok(());
            }
            st.buffers.clear();
            st.files.clear();
            st.fd_to_handle.clear();
            st.streams.clear();
            st.params = crate::config_file::seeded_params();
            st.params_locked = false;
            let batches: Vec<Arc<Batch>> = st.batches.drain().map(|(_, b)| b).collect();
            (st.engine.take(), batches)
        };
        // Outside the lock: cancel batches (waits for their running entries), then
        // drop the engine, which joins its workers after they drain.
        for b in batches {
            b.cancel();
        }
        drop(engine);
        Ok(())
    }

    pub fn use_count(&self) -> i64 {
        self.read().refcount
    }

    pub fn engine(&self) -> Option<Engine> {
        self.read().engine.clone()
    }

    /// `hipFileHandleRegister` for an OpaqueFD descriptor.
    pub fn register_handle(&self, fd: RawFd) -> Result<usize> {
        if self.read().fd_to_handle.contains_key(&fd) {
            return Err(OpError::HandleAlreadyRegistered.into());
        }
        let file = Arc::new(File::probe(fd)?);
        let mut st = self.write();
        if st.fd_to_handle.contains_key(&fd) {
            return Err(OpError::HandleAlreadyRegistered.into());
        }
        self.implicit_open_locked(&mut st)?;
        let handle = new_handle();
        st.fd_to_handle.insert(fd, handle);
        st.files.insert(handle, file);
        Ok(handle)
    }

    /// `hipFileHandleDeregister`: unknown handles are ignored; a handle with I/O
    /// in flight stays registered (the error is swallowed, as upstream).
    pub fn deregister_handle(&self, handle: usize) {
        let mut st = self.write();
        let Some(f) = st.files.get(&handle) else {
            return;
        };
        if f.busy() {
            log_warn!("hipFileHandleDeregister: handle {handle:#x} has I/O in flight; it stays registered");
            return;
        }
        let fd = f.client_fd;
        st.files.remove(&handle);
        st.fd_to_handle.remove(&fd);
    }

    pub fn file(&self, handle: usize) -> Option<Arc<File>> {
        self.read().files.get(&handle).cloned()
    }

    /// Classify a pointer; runtime failures map to the spec's codes (§5.4 step 2).
    pub fn pointer_info(&self, ptr: u64) -> Result<PtrInfo> {
        match self.gpu().pointer_info(ptr) {
            Ok(i) => Ok(i),
            Err(gpu::GpuError::InvalidValue(_)) => Err(OpError::InvalidValue.into()),
            Err(e) => Err(Error::Gpu(e)),
        }
    }

    /// `hipFileBufRegister`. The count is set to 1 before validation (spec §5.1).
    pub fn register_buffer(&self, ptr: u64, len: u64, flags: i32) -> Result<()> {
        self.implicit_open()?;
        if ptr == 0 {
            return Err(OpError::InvalidValue.into());
        }
        let info = self.pointer_info(ptr)?;
        let end = ptr.checked_add(len).ok_or(OpError::HipPointerRangeError)?;
        if let MemKind::Device { .. } = info.kind {
            let alloc_end = info.alloc_base.saturating_add(info.alloc_bytes);
            if ptr < info.alloc_base || ptr >= alloc_end || end > alloc_end {
                return Err(OpError::HipPointerRangeError.into());
            }
        } else if !host_range_mapped(ptr, len.max(1)) {
            log_warn!(
                "hipFileBufRegister: [{ptr:#x}, +{len}) is not mapped memory of this process \
                 (neither device memory nor host memory)"
            );
            return Err(OpError::HipMemoryTypeInvalid.into());
        }
        let mut st = self.write();
        if st.buffers.contains_key(&ptr) {
            return Err(OpError::MemoryAlreadyRegistered.into());
        }
        st.buffers.insert(
            ptr,
            Arc::new(BufferReg {
                base: ptr,
                len,
                flags,
                info,
                inflight: AtomicUsize::new(0),
            }),
        );
        Ok(())
    }

    /// `hipFileBufDeregister`.
    pub fn deregister_buffer(&self, ptr: u64) -> Result<()> {
        let mut st = self.write();
        if st.refcount == 0 {
            return Err(OpError::DriverClosing.into());
        }
        let Some(b) = st.buffers.get(&ptr) else {
            return Err(OpError::MemoryNotRegistered.into());
        };
        if b.inflight.load(Ordering::Acquire) > 0 {
            return Err(OpError::InternalError.into());
        }
        st.buffers.remove(&ptr);
        Ok(())
    }

    /// What one I/O call needs from the registry, read under one hold of
    /// its lock: the engine, the file registered as `handle`, the buffer
    /// registered with base `ptr`. Taking a read lock is a locked
    /// read-modify-write of the lock word and releasing it another; threads
    /// calling at once pass that cache line between their cores each time,
    /// so a call takes the lock once rather than once per question.
    pub fn lookup_io(&self, handle: usize, ptr: u64) -> IoLookup {
        let st = self.read();
        IoLookup {
            engine: st.engine.clone(),
            file: st.files.get(&handle).cloned(),
            buffer: st.buffers.get(&ptr).cloned(),
        }
    }

    /// The buffer an I/O on `ptr` uses: the registration with that exact base,
    /// or a temporary description from the pointer's attributes (spec §5.4).
    pub fn resolve_buffer(&self, ptr: u64) -> Result<ResolvedBuffer> {
        if ptr == 0 {
            return Err(OpError::InvalidValue.into());
        }
        let reg = self.read().buffers.get(&ptr).cloned();
        self.resolve_found_buffer(ptr, reg)
    }

    /// [`Driver::resolve_buffer`] with the registration at `ptr` (if any)
    /// already looked up (by [`Driver::lookup_io`]).
    pub fn resolve_found_buffer(
        &self,
        ptr: u64,
        reg: Option<Arc<BufferReg>>,
    ) -> Result<ResolvedBuffer> {
        if ptr == 0 {
            return Err(OpError::InvalidValue.into());
        }
        if let Some(b) = reg {
            return Ok(ResolvedBuffer {
                mem: Memory::from_info(ptr, &b.info),
                len: b.len,
                info: b.info,
                reg: Some(b),
            });
        }
        let info = self.pointer_info(ptr)?;
        let len = match info.kind {
            MemKind::Device { .. } => (info.alloc_base + info.alloc_bytes).saturating_sub(ptr),
            // Host memory has no known extent: the caller vouches for it.
            _ => u64::MAX - ptr,
        };
        Ok(ResolvedBuffer {
            mem: Memory::from_info(ptr, &info),
            len,
            info,
            reg: None,
        })
    }
}

/// Whether every page of `[ptr, ptr + len)` is mapped in this process.
///
/// The GPU runtime calls any address it does not know pageable host memory,
/// `(void *)0x10` included. `mincore` fails with ENOMEM where part of its range
/// has no mapping, and answers without faulting anything in or touching the
/// memory (an untouched or PROT_NONE mapping still counts as mapped). It
/// walks the page tables, so a large range is asked in windows of 256 MiB
/// with one small vector: 64 GiB costs 256 calls.
fn host_range_mapped(ptr: u64, len: u64) -> bool {
    const PAGE: u64 = 4096;
    const WINDOW_PAGES: u64 = 65536;
    let Some(end) = ptr.checked_add(len) else {
        return false;
    };
    let mut at = ptr & !(PAGE - 1);
    let mut vec = vec![0u8; WINDOW_PAGES as usize];
    while at < end {
        let bytes = (end - at).min(WINDOW_PAGES * PAGE);
        // SAFETY: mincore writes one byte per page of the range into `vec`,
        // which has room for WINDOW_PAGES pages; it reads no memory of the range.
        let r = unsafe { libc::mincore(at as *mut libc::c_void, bytes as usize, vec.as_mut_ptr()) };
        if r != 0 {
            let e = std::io::Error::last_os_error().raw_os_error();
            // ENOMEM: a hole (or beyond the address space). Anything else
            // (EAGAIN, a kernel without mincore) is no answer: allow the range.
            return e != Some(libc::ENOMEM);
        }
        at += bytes;
    }
    true
}

/// Marks a registered buffer busy for the life of an I/O.
pub struct BufferUse(Option<Arc<BufferReg>>);

impl BufferUse {
    pub fn new(reg: Option<Arc<BufferReg>>) -> Self {
        if let Some(r) = &reg {
            r.inflight.fetch_add(1, Ordering::AcqRel);
        }
        BufferUse(reg)
    }
}

impl Drop for BufferUse {
    fn drop(&mut self) {
        if let Some(r) = &self.0 {
            r.inflight.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl Driver {
    /// Use `cfg` instead of the settings from the environment, for a program
    /// that embeds the library and takes its settings another way (the
    /// Python package's keyword arguments). Only before the driver has read
    /// its settings (its first open in this process); after that,
    /// `DriverAlreadyOpen` (5026) and nothing changes.
    pub fn set_config(&self, cfg: Config) -> Result<()> {
        self.env
            .set(cfg)
            .map_err(|_| Error::Op(OpError::DriverAlreadyOpen))
    }
}
