//! BAR1 size of a GPU for `cuFileGetBARSizeInKB`, from two sources in turn:
//!
//! 1. sysfs: `/sys/bus/pci/devices/<bus id>/resource`, one `start end flags`
//!    line per PCI region, BAR1 on the second line. Exact and cheap, but a
//!    VM or container that passes the GPU through may not expose the device's
//!    PCI node (the H200 Firecracker guest has none).
//! 2. NVML, loaded at run time (`libnvidia-ml.so.1`, installed with the
//!    NVIDIA driver): `nvmlDeviceGetBAR1MemoryInfo` reports `bar1Total` from
//!    the driver itself, which knows the aperture wherever the GPU works.
//!
//! NVML is never linked: a host without it (CI, AMD) loads this library as
//! before and gets an error that names both failures. The device is found in
//! NVML by PCI bus id, not by index, because CUDA's ordinals follow
//! `CUDA_VISIBLE_DEVICES` and `CUDA_DEVICE_ORDER` while NVML's do not.

use std::ffi::{c_char, c_int, c_uint, c_ulonglong, c_void, CStr, CString};
use std::fmt;
use std::sync::OnceLock;

/// Where a BAR1 size came from (for the log line).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    Sysfs,
    Nvml,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Source::Sysfs => "sysfs",
            Source::Nvml => "NVML",
        })
    }
}

/// BAR1 size in bytes of the PCI device `bus` (sysfs spelling,
/// `0000:3b:00.0`): sysfs first, then NVML. The error says why each failed.
pub(crate) fn bar1_bytes(bus: &str) -> Result<(u64, Source), String> {
    first_of(bus, sysfs_bar1_bytes, nvml_bar1_bytes)
}

/// The selection: `sysfs`, else `nvml`, else an error carrying both reasons.
fn first_of(
    bus: &str,
    sysfs: impl FnOnce(&str) -> Result<u64, String>,
    nvml: impl FnOnce(&str) -> Result<u64, String>,
) -> Result<(u64, Source), String> {
    let s = match sysfs(bus) {
        Ok(b) => return Ok((b, Source::Sysfs)),
        Err(e) => e,
    };
    match nvml(bus) {
        Ok(b) => Ok((b, Source::Nvml)),
        Err(n) => Err(format!("sysfs: {s}; NVML: {n}")),
    }
}

fn sysfs_bar1_bytes(bus: &str) -> Result<u64, String> {
    let path = format!("/sys/bus/pci/devices/{bus}/resource");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
    bar_size_from_resource(&text, 1).ok_or_else(|| format!("{path} has no BAR1 region"))
}

/// Size of BAR `bar` in a sysfs `resource` file: one `start end flags` line
/// per region, in hex; an unused region reads all zeros.
pub(crate) fn bar_size_from_resource(text: &str, bar: usize) -> Option<u64> {
    let line = text.lines().nth(bar)?;
    let mut f = line
        .split_whitespace()
        .map(|w| u64::from_str_radix(w.trim_start_matches("0x"), 16).ok());
    let (start, end) = (f.next()??, f.next()??);
    (end > start).then(|| end - start + 1)
}

/// A PCI function address. CUDA writes `0000:3b:00.0`; NVML writes
/// `00000000:3B:00.0` (eight-digit domain, upper case) in `busId` and takes
/// either spelling; the comparison goes through this value, not the text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PciAddr {
    pub domain: u32,
    pub bus: u8,
    pub device: u8,
    pub function: u8,
}

impl PciAddr {
    /// `domain:bus:device.function` or `bus:device.function` (domain 0), hex.
    pub(crate) fn parse(s: &str) -> Option<PciAddr> {
        let s = s.trim().trim_end_matches('\0');
        let (head, function) = s.rsplit_once('.')?;
        let parts: Vec<&str> = head.split(':').collect();
        let (domain, bus, device) = match parts[..] {
            [d, b, v] => (d, b, v),
            [b, v] => ("0", b, v),
            _ => return None,
        };
        let hex8 =
            |w: &str| (!w.is_empty() && w.len() <= 2).then(|| u8::from_str_radix(w, 16).ok())?;
        let a = PciAddr {
            domain: (!domain.is_empty() && domain.len() <= 8)
                .then(|| u32::from_str_radix(domain, 16).ok())??,
            bus: hex8(bus)?,
            device: hex8(device)?,
            function: hex8(function)?,
        };
        (a.device < 32 && a.function < 8).then_some(a)
    }
}

/// The index of the first device whose address is `want`.
fn index_of(want: PciAddr, devices: impl IntoIterator<Item = (u32, PciAddr)>) -> Option<u32> {
    devices
        .into_iter()
        .find(|&(_, a)| a == want)
        .map(|(i, _)| i)
}

// ---------------------------------------------------------------------------
// NVML, declared from NVIDIA's NVML API reference (nvml.h).

/// The soname the NVIDIA driver installs.
const NVML_LIBRARY: &str = "libnvidia-ml.so.1";

/// `nvmlReturn_t`: 0 is `NVML_SUCCESS`.
type NvmlReturn = c_int;
const NVML_SUCCESS: NvmlReturn = 0;
/// `nvmlDevice_t`, an opaque pointer.
type NvmlDevice = *mut c_void;

/// `nvmlBAR1Memory_t`: sizes in bytes. NVML writes every field; only the
/// total is read.
#[repr(C)]
#[derive(Default)]
#[allow(dead_code)]
struct NvmlBar1Memory {
    bar1_total: c_ulonglong,
    bar1_free: c_ulonglong,
    bar1_used: c_ulonglong,
}

/// `nvmlPciInfo_t` (`NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE` 16,
/// `NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE` 32), filled by
/// `nvmlDeviceGetPciInfo_v3`. NVML writes every field; only `busId` is read.
#[repr(C)]
#[allow(dead_code)]
struct NvmlPciInfo {
    bus_id_legacy: [c_char; 16],
    domain: c_uint,
    bus: c_uint,
    device: c_uint,
    pci_device_id: c_uint,
    pci_sub_system_id: c_uint,
    bus_id: [c_char; 32],
}

type InitFn = unsafe extern "C" fn() -> NvmlReturn;
type ShutdownFn = unsafe extern "C" fn() -> NvmlReturn;
type ErrorStringFn = unsafe extern "C" fn(NvmlReturn) -> *const c_char;
type ByPciBusIdFn = unsafe extern "C" fn(*const c_char, *mut NvmlDevice) -> NvmlReturn;
type CountFn = unsafe extern "C" fn(*mut c_uint) -> NvmlReturn;
type ByIndexFn = unsafe extern "C" fn(c_uint, *mut NvmlDevice) -> NvmlReturn;
type PciInfoFn = unsafe extern "C" fn(NvmlDevice, *mut NvmlPciInfo) -> NvmlReturn;
type Bar1Fn = unsafe extern "C" fn(NvmlDevice, *mut NvmlBar1Memory) -> NvmlReturn;

/// The NVML entry points this module calls, resolved once.
struct Nvml {
    init: InitFn,
    shutdown: ShutdownFn,
    error_string: ErrorStringFn,
    by_pci_bus_id: ByPciBusIdFn,
    count: CountFn,
    by_index: ByIndexFn,
    pci_info: PciInfoFn,
    bar1: Bar1Fn,
    /// Kept loaded for the process's life: the function pointers above point
    /// into it, and NVML's own state outlives any one call.
    _lib: libloading::Library,
}

impl Nvml {
    /// Open `name` and resolve every entry point; an error names what failed.
    fn load(name: &str) -> Result<Nvml, String> {
        // SAFETY: loading NVML runs only its own initialisers, which touch no
        // state of this process.
        let lib = unsafe { libloading::Library::new(name) }
            .map_err(|e| format!("cannot load {name} ({e})"))?;
        fn sym<T: Copy>(lib: &libloading::Library, name: &str, what: &[u8]) -> Result<T, String> {
            // SAFETY: each `T` below is the signature nvml.h gives `what`.
            unsafe { lib.get::<T>(what) }.map(|s| *s).map_err(|e| {
                format!(
                    "{name} has no {} ({e})",
                    String::from_utf8_lossy(&what[..what.len() - 1])
                )
            })
        }
        Ok(Nvml {
            init: sym(&lib, name, b"nvmlInit_v2\0")?,
            shutdown: sym(&lib, name, b"nvmlShutdown\0")?,
            error_string: sym(&lib, name, b"nvmlErrorString\0")?,
            by_pci_bus_id: sym(&lib, name, b"nvmlDeviceGetHandleByPciBusId_v2\0")?,
            count: sym(&lib, name, b"nvmlDeviceGetCount_v2\0")?,
            by_index: sym(&lib, name, b"nvmlDeviceGetHandleByIndex_v2\0")?,
            pci_info: sym(&lib, name, b"nvmlDeviceGetPciInfo_v3\0")?,
            bar1: sym(&lib, name, b"nvmlDeviceGetBAR1MemoryInfo\0")?,
            _lib: lib,
        })
    }

    /// `call` and its code as an error with NVML's own words.
    fn check(&self, call: &str, r: NvmlReturn) -> Result<(), String> {
        if r == NVML_SUCCESS {
            return Ok(());
        }
        // SAFETY: nvmlErrorString takes any code and returns a static string
        // (or NULL, checked).
        let p = unsafe { (self.error_string)(r) };
        let text = if p.is_null() {
            "unknown error".into()
        } else {
            // SAFETY: a NUL-terminated static string from NVML.
            unsafe { CStr::from_ptr(p) }.to_string_lossy()
        };
        Err(format!("{call} failed: {text} ({r})"))
    }

    /// BAR1 size of the device at `bus`, between nvmlInit_v2 and nvmlShutdown
    /// (NVML counts them, so another user of NVML in the process is unaffected).
    fn bar1_bytes(&self, bus: &str) -> Result<u64, String> {
        // SAFETY: nvmlInit_v2 takes no arguments and may be called repeatedly.
        self.check("nvmlInit_v2", unsafe { (self.init)() })?;
        let r = self.device(bus).and_then(|dev| {
            let mut m = NvmlBar1Memory::default();
            // SAFETY: `dev` is a handle NVML returned since init; `m` is a
            // live nvmlBAR1Memory_t.
            self.check("nvmlDeviceGetBAR1MemoryInfo", unsafe {
                (self.bar1)(dev, &mut m)
            })?;
            (m.bar1_total > 0)
                .then_some(m.bar1_total)
                .ok_or_else(|| "nvmlDeviceGetBAR1MemoryInfo reports a BAR1 of 0 bytes".into())
        });
        // SAFETY: balances the successful nvmlInit_v2 above.
        unsafe { (self.shutdown)() };
        r
    }

    /// The handle of `bus`: by bus id, else by walking the indices and
    /// comparing each device's PCI address (some NVML versions refuse a bus
    /// id spelt differently from their own `busId`).
    fn device(&self, bus: &str) -> Result<NvmlDevice, String> {
        let want = PciAddr::parse(bus).ok_or_else(|| format!("{bus:?} is not a PCI bus id"))?;
        let c = CString::new(bus).map_err(|_| format!("{bus:?} contains a NUL byte"))?;
        let mut dev: NvmlDevice = std::ptr::null_mut();
        // SAFETY: `c` is a NUL-terminated string; `dev` a live out-parameter.
        let direct = self.check("nvmlDeviceGetHandleByPciBusId_v2", unsafe {
            (self.by_pci_bus_id)(c.as_ptr(), &mut dev)
        });
        if direct.is_ok() && !dev.is_null() {
            return Ok(dev);
        }
        let mut n: c_uint = 0;
        // SAFETY: `n` is a live out-parameter.
        self.check("nvmlDeviceGetCount_v2", unsafe { (self.count)(&mut n) })?;
        let mut handles = Vec::new();
        for i in 0..n {
            let mut d: NvmlDevice = std::ptr::null_mut();
            // SAFETY: `i` is below the device count; `d` a live out-parameter.
            let r = unsafe { (self.by_index)(i, &mut d) };
            if r != NVML_SUCCESS {
                continue; // a device NVML cannot open (no permission, lost) is not ours
            }
            // SAFETY: nvmlPciInfo_t is plain integers and chars; all zero is valid.
            let mut p: NvmlPciInfo = unsafe { std::mem::zeroed() };
            // SAFETY: `d` is a handle from NVML; `p` a live nvmlPciInfo_t.
            let r = unsafe { (self.pci_info)(d, &mut p) };
            // Up to the first NUL, never past the array.
            let text: String = p
                .bus_id
                .iter()
                .take_while(|&&c| c != 0)
                .map(|&c| c as u8 as char)
                .collect();
            if let (NVML_SUCCESS, Some(a)) = (r, PciAddr::parse(&text)) {
                handles.push((i, a, d));
            }
        }
        let found = index_of(want, handles.iter().map(|&(i, a, _)| (i, a)));
        match found.and_then(|i| handles.iter().find(|h| h.0 == i)) {
            Some(&(_, _, d)) => Ok(d),
            None => Err(format!(
                "{}; no device among NVML's {n} has PCI address {bus}",
                direct
                    .err()
                    .unwrap_or_else(|| "nvmlDeviceGetHandleByPciBusId_v2 gave no handle".into())
            )),
        }
    }
}

fn nvml_bar1_bytes(bus: &str) -> Result<u64, String> {
    static NVML: OnceLock<Result<Nvml, String>> = OnceLock::new();
    NVML.get_or_init(|| Nvml::load(NVML_LIBRARY))
        .as_ref()
        .map_err(Clone::clone)?
        .bar1_bytes(bus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bar1_is_the_second_region_of_the_resource_file() {
        let text = "0x00000000fa000000 0x00000000faffffff 0x0000000000040200\n\
                    0x0000380000000000 0x0000383fffffffff 0x000000000014220c\n\
                    0x0000384000000000 0x0000384001ffffff 0x000000000014220c\n";
        assert_eq!(bar_size_from_resource(text, 1), Some(256 << 30));
        assert_eq!(bar_size_from_resource(text, 0), Some(16 << 20));
    }

    #[test]
    fn an_unused_region_has_no_size() {
        let text = "0x0 0x0 0x0\n0x0000000000000000 0x0000000000000000 0x0000000000000000\n";
        assert_eq!(bar_size_from_resource(text, 1), None);
        assert_eq!(bar_size_from_resource(text, 5), None);
    }

    #[test]
    fn cuda_and_nvml_spellings_of_a_bus_id_are_the_same_address() {
        let cuda = PciAddr::parse("0000:3b:00.0").unwrap();
        let nvml = PciAddr::parse("00000000:3B:00.0\0\0").unwrap();
        assert_eq!(cuda, nvml);
        assert_eq!(
            cuda,
            PciAddr {
                domain: 0,
                bus: 0x3b,
                device: 0,
                function: 0
            }
        );
        assert_eq!(PciAddr::parse("3b:00.0"), Some(cuda));
    }

    #[test]
    fn malformed_bus_ids_do_not_parse() {
        for bad in [
            "",
            "0000:3b:00",
            "0000:3b:20.0",
            "0000:3b:00.8",
            "0000:3bb:00.0",
            "x:3b:00.0",
            "1:2:3:4.0",
            "000000000:3b:00.0",
        ] {
            assert_eq!(PciAddr::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_device_is_chosen_by_address_not_by_position() {
        let a = |bus| PciAddr {
            domain: 0,
            bus,
            device: 0,
            function: 0,
        };
        let devices = [(0, a(0x18)), (1, a(0x3b)), (2, a(0x86))];
        assert_eq!(index_of(a(0x86), devices), Some(2));
        assert_eq!(index_of(a(0x3c), devices), None);
    }

    #[test]
    fn sysfs_wins_and_nvml_is_not_asked() {
        let r = first_of("0000:3b:00.0", |_| Ok(1 << 30), |_| panic!("NVML asked"));
        assert_eq!(r, Ok((1 << 30, Source::Sysfs)));
    }

    #[test]
    fn nvml_answers_when_sysfs_cannot() {
        let r = first_of(
            "0000:3b:00.0",
            |_| Err("no node".into()),
            |b| {
                assert_eq!(b, "0000:3b:00.0");
                Ok(2 << 30)
            },
        );
        assert_eq!(r, Ok((2 << 30, Source::Nvml)));
    }

    #[test]
    fn the_error_names_both_failures() {
        let r = first_of(
            "0000:3b:00.0",
            |_| Err("no node".into()),
            |_| Err("no library".into()),
        );
        assert_eq!(r, Err("sysfs: no node; NVML: no library".into()));
    }

    #[test]
    fn a_missing_nvml_library_is_an_error_not_a_crash() {
        let e = Nvml::load("libnvidia-ml-not-installed.so.1").err().unwrap();
        assert!(
            e.contains("cannot load libnvidia-ml-not-installed.so.1"),
            "{e}"
        );
    }

    /// A stand-in libnvidia-ml written in C from the same API reference: two
    /// devices, at 18:00.0 and 3b:00.0, with BAR1 sizes of 1 GiB and 64 GiB.
    /// `fake_nvml_bus_id_fails(1)` makes nvmlDeviceGetHandleByPciBusId_v2
    /// fail so that the index walk must find the device.
    const FAKE_NVML: &str = r#"
#include <string.h>
#include <stdio.h>
typedef struct { char legacy[16]; unsigned domain, bus, device, id, sub; char busId[32]; } pci_t;
typedef struct { unsigned long long total, free, used; } bar1_t;
static int inits, bus_id_fails;
void fake_nvml_bus_id_fails(int on) { bus_id_fails = on; }
static const unsigned buses[2] = {0x18, 0x3b};
int nvmlInit_v2(void) { inits++; return 0; }
int nvmlShutdown(void) { return inits-- > 0 ? 0 : 1; }
const char *nvmlErrorString(int r) { return r == 6 ? "Not Found" : "Unknown Error"; }
int nvmlDeviceGetHandleByPciBusId_v2(const char *id, void **dev) {
    if (!inits) return 1;
    if (bus_id_fails) return 6;
    for (int i = 0; i < 2; i++) {
        char want[32];
        snprintf(want, sizeof want, "0000:%02x:00.0", buses[i]);
        if (!strcmp(id, want)) { *dev = (void *)(long)(i + 1); return 0; }
    }
    return 6;
}
int nvmlDeviceGetCount_v2(unsigned *n) { if (!inits) return 1; *n = 2; return 0; }
int nvmlDeviceGetHandleByIndex_v2(unsigned i, void **dev) {
    if (!inits || i >= 2) return 2;
    *dev = (void *)(long)(i + 1); return 0;
}
int nvmlDeviceGetPciInfo_v3(void *dev, pci_t *p) {
    long i = (long)dev - 1;
    memset(p, 0x7f, sizeof *p);
    p->domain = 0; p->bus = buses[i]; p->device = 0;
    snprintf(p->busId, sizeof p->busId, "00000000:%02X:00.0", buses[i]);
    return 0;
}
int nvmlDeviceGetBAR1MemoryInfo(void *dev, bar1_t *m) {
    if (!inits) return 1;
    m->total = (long)dev == 1 ? 1ULL << 30 : 64ULL << 30; m->free = 0; m->used = 0;
    return 0;
}
"#;

    fn fake_nvml() -> String {
        let dir = std::env::var("HIPFILE_TEST_DIR")
            .unwrap_or_else(|_| std::env::temp_dir().display().to_string());
        std::fs::create_dir_all(&dir).unwrap();
        let src = format!("{dir}/fake-nvml-{}.c", std::process::id());
        let lib = format!("{dir}/libfake-nvml-{}.so", std::process::id());
        std::fs::write(&src, FAKE_NVML).unwrap();
        let ok = std::process::Command::new("gcc")
            .args(["-shared", "-fPIC", "-O1", "-o", &lib, &src])
            .status()
            .expect("gcc is needed for this test")
            .success();
        std::fs::remove_file(&src).ok();
        assert!(ok, "gcc failed on the stand-in NVML");
        lib
    }

    #[test]
    fn nvml_finds_the_device_by_bus_id_and_else_by_walking_the_indices() {
        let lib = fake_nvml();
        let nvml = Nvml::load(&lib).unwrap();
        assert_eq!(nvml.bar1_bytes("0000:3b:00.0"), Ok(64 << 30));
        assert_eq!(nvml.bar1_bytes("0000:18:00.0"), Ok(1 << 30));
        // SAFETY: the stand-in defines `void fake_nvml_bus_id_fails(int)`.
        let fails: libloading::Symbol<unsafe extern "C" fn(c_int)> =
            unsafe { nvml._lib.get(b"fake_nvml_bus_id_fails\0") }.unwrap();
        // SAFETY: sets a flag in the stand-in library.
        unsafe { fails(1) };
        let walked = nvml.bar1_bytes("0000:3b:00.0");
        let absent = nvml.bar1_bytes("0000:86:00.0");
        std::fs::remove_file(&lib).ok();
        assert_eq!(walked, Ok(64 << 30));
        let e = absent.unwrap_err();
        assert!(
            e.contains("Not Found (6)") && e.contains("no device among NVML's 2"),
            "{e}"
        );
    }

    /// The whole chain on a bus id no machine has: both sources fail, and the
    /// message says why each did (on a host without NVML, that it cannot be
    /// loaded; with NVML, that no device has the address).
    #[test]
    fn an_absent_device_gives_an_error_from_each_source() {
        let e = bar1_bytes("ffff:ff:1f.7").unwrap_err();
        assert!(
            e.starts_with("sysfs: /sys/bus/pci/devices/ffff:ff:1f.7/resource: "),
            "{e}"
        );
        let nvml = e
            .split_once("; NVML: ")
            .map(|(_, n)| n)
            .unwrap_or_else(|| panic!("{e}"));
        assert!(
            nvml.contains("cannot load libnvidia-ml.so.1")
                || nvml.contains("ffff:ff:1f.7")
                || nvml.contains("nvmlInit_v2"),
            "{e}"
        );
    }
}
