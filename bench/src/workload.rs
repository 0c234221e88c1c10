//! Which I/O comes next: the file (fio's `file_service_type` over the files
//! open at once, `openfiles`), the direction (`rwmixread`), and the offset
//! (sequential, or random with each block once per pass unless
//! `norandommap`), pass after pass (`loops`, `time_based`).

use crate::engines::Dir;
use crate::options::FileService;

/// One I/O the generator hands out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Next {
    pub file: usize,
    pub dir: Dir,
    pub offset: u64,
    pub len: usize,
}

/// A bijection of `[0, n)`: a keyed mixing function over the next power of
/// two, walked until it lands below `n` (cycle walking keeps it a bijection).
/// It needs no memory however many blocks a file has.
#[derive(Clone, Debug)]
struct Permutation {
    n: u64,
    mask: u64,
    half: u32,
    keys: [u64; 3],
    next: u64,
}

impl Permutation {
    fn new(n: u64, seed: u64) -> Permutation {
        let bits = 64 - n.saturating_sub(1).leading_zeros();
        let mut s = seed;
        let mut key = || {
            s = splitmix(s);
            s
        };
        Permutation {
            n,
            mask: if bits >= 64 {
                u64::MAX
            } else {
                (1u64 << bits) - 1
            },
            half: bits / 2 + 1,
            keys: [key() | 1, key() | 1, key()],
            next: 0,
        }
    }

    /// A bijection on `bits`-bit numbers: odd multiplications, xor-shifts
    /// and an added key each map the range onto itself.
    fn mix(&self, mut x: u64) -> u64 {
        for k in &self.keys {
            x = x.wrapping_mul(*k | 1) & self.mask;
            x ^= x >> self.half;
            x = x.wrapping_add(*k) & self.mask;
        }
        x
    }

    fn next(&mut self) -> Option<u64> {
        if self.next >= self.n {
            return None;
        }
        let mut x = self.mix(self.next);
        while x >= self.n {
            x = self.mix(x);
        }
        self.next += 1;
        Some(x)
    }
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Where one file's I/O goes: the region `[start, start + len)`.
#[derive(Clone, Debug)]
struct Cursor {
    start: u64,
    len: u64,
    pos: u64,
    blocks: u64,
    issued_blocks: u64,
    perm: Option<Permutation>,
    done: bool,
}

/// The workload's shape.
#[derive(Clone, Debug)]
pub struct Shape {
    /// Each file's region: (start, length).
    pub regions: Vec<(u64, u64)>,
    pub bs: [u64; 2],
    pub read_pct: u32,
    pub random: bool,
    pub norandommap: bool,
    pub service: FileService,
    /// I/Os to a file before the next is chosen.
    pub per_turn: u64,
    /// Files in service at once.
    pub open_limit: usize,
    /// Bytes per pass (io_size, by default the regions' total).
    pub pass_bytes: u64,
    /// Passes; None = until stopped (time_based).
    pub passes: Option<u64>,
    pub seed: u64,
}

pub struct Gen {
    shape: Shape,
    files: Vec<Cursor>,
    /// Files in service, in the order they joined.
    active: Vec<usize>,
    /// Next file (by index) to join the service.
    next_join: usize,
    turn: usize,
    on_turn: u64,
    issued: u64,
    passes_left: Option<u64>,
    rng: u64,
    pass_seed: u64,
}

impl Gen {
    pub fn new(shape: Shape) -> Gen {
        let passes_left = shape.passes;
        let rng = splitmix(shape.seed);
        let mut g = Gen {
            files: Vec::new(),
            active: Vec::new(),
            next_join: 0,
            turn: 0,
            on_turn: 0,
            issued: 0,
            passes_left,
            rng,
            pass_seed: shape.seed,
            shape,
        };
        g.reset_files();
        g
    }

    fn unit(&self) -> u64 {
        match self.shape.read_pct {
            100 => self.shape.bs[0],
            0 => self.shape.bs[1],
            _ => self.shape.bs[0].min(self.shape.bs[1]),
        }
        .max(1)
    }

    fn reset_files(&mut self) {
        let unit = self.unit();
        self.pass_seed = splitmix(self.pass_seed);
        let (random, norandommap, seed) =
            (self.shape.random, self.shape.norandommap, self.pass_seed);
        self.files = self
            .shape
            .regions
            .iter()
            .enumerate()
            .map(|(i, &(start, len))| {
                let blocks = len.div_ceil(unit);
                Cursor {
                    start,
                    len,
                    pos: start,
                    blocks,
                    issued_blocks: 0,
                    perm: (random && !norandommap)
                        .then(|| Permutation::new(blocks, seed ^ (i as u64).wrapping_mul(0x9e37))),
                    done: len == 0,
                }
            })
            .collect();
        self.active.clear();
        self.next_join = 0;
        self.turn = 0;
        self.on_turn = 0;
        self.fill_active();
    }

    fn fill_active(&mut self) {
        while self.active.len() < self.shape.open_limit.max(1) && self.next_join < self.files.len()
        {
            let f = self.next_join;
            self.next_join += 1;
            if !self.files[f].done {
                self.active.push(f);
            }
        }
    }

    fn rand(&mut self) -> u64 {
        self.rng = splitmix(self.rng);
        self.rng
    }

    /// True when file `f` has no more I/O this pass.
    pub fn is_done(&self, f: usize) -> bool {
        self.files.get(f).is_none_or(|c| c.done)
    }

    fn next_pass(&mut self) -> bool {
        match self.passes_left {
            None => true,
            Some(n) if n > 1 => {
                self.passes_left = Some(n - 1);
                true
            }
            Some(_) => {
                self.passes_left = Some(0);
                false
            }
        }
    }

    fn pick_file(&mut self) -> usize {
        let n = self.active.len();
        if self.on_turn >= self.shape.per_turn {
            self.on_turn = 0;
            self.turn = match self.shape.service {
                FileService::Sequential => 0,
                FileService::RoundRobin => (self.turn + 1) % n,
                FileService::Random => (self.rand() % n as u64) as usize,
            };
        }
        if self.turn >= n {
            self.turn = 0;
        }
        self.on_turn += 1;
        self.active[self.turn]
    }

    /// File `f` (the one in turn) has no more I/O this pass: take it out of
    /// service, let the next file join, and give the turn to the file that
    /// followed it.
    fn retire(&mut self, f: usize) {
        let Some(pos) = self.active.iter().position(|&a| a == f) else {
            return;
        };
        self.active.remove(pos);
        self.fill_active();
        // pick_file advances the turn by one before the next I/O.
        self.on_turn = self.shape.per_turn;
        self.turn = if pos == 0 {
            self.active.len().saturating_sub(1)
        } else {
            pos - 1
        };
    }

    pub fn next_op(&mut self) -> Option<Next> {
        if self.shape.pass_bytes == 0 || self.passes_left == Some(0) {
            return None;
        }
        loop {
            if self.issued >= self.shape.pass_bytes {
                if !self.next_pass() {
                    return None;
                }
                self.issued = 0;
                self.reset_files();
            } else if self.active.is_empty() {
                // Every region is done before io_size: go round the files again.
                self.reset_files();
                if self.active.is_empty() {
                    return None;
                }
            }
            let f = self.pick_file();
            let dir = match self.shape.read_pct {
                100 => Dir::Read,
                0 => Dir::Write,
                p => {
                    if self.rand() % 100 < p as u64 {
                        Dir::Read
                    } else {
                        Dir::Write
                    }
                }
            };
            let bs = self.shape.bs[(dir == Dir::Write) as usize];
            let unit = self.unit();
            let left_in_pass = self.shape.pass_bytes - self.issued;
            let random = self.shape.random;
            let rnd = if random && self.files[f].perm.is_none() {
                self.rand()
            } else {
                0
            };
            let c = &mut self.files[f];
            let offset = if random {
                let block = match c.perm.as_mut() {
                    Some(p) => p.next(),
                    None => (c.issued_blocks < c.blocks).then(|| rnd % c.blocks),
                };
                let Some(block) = block else {
                    c.done = true;
                    self.retire(f);
                    continue;
                };
                c.issued_blocks += 1;
                if c.issued_blocks >= c.blocks {
                    c.done = true;
                }
                c.start + block * unit
            } else {
                let o = c.pos;
                c.pos += bs.min(c.start + c.len - o);
                if c.pos >= c.start + c.len {
                    c.done = true;
                }
                o
            };
            let end = c.start + c.len;
            let len = bs.min(end - offset).min(left_in_pass);
            let done = c.done;
            self.issued += len;
            if done {
                self.retire(f);
            }
            return Some(Next {
                file: f,
                dir,
                offset,
                len: len as usize,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(regions: Vec<(u64, u64)>) -> Shape {
        let total = regions.iter().map(|r| r.1).sum();
        Shape {
            regions,
            bs: [4096, 4096],
            read_pct: 100,
            random: false,
            norandommap: false,
            service: FileService::RoundRobin,
            per_turn: 1,
            open_limit: usize::MAX,
            pass_bytes: total,
            passes: Some(1),
            seed: 1,
        }
    }

    fn drain(g: &mut Gen) -> Vec<Next> {
        let mut v = Vec::new();
        while let Some(op) = g.next_op() {
            v.push(op);
            assert!(v.len() < 1_000_000);
        }
        v
    }

    #[test]
    fn sequential_covers_the_region_per_pass() {
        let mut s = shape(vec![(1000, 10 * 4096 + 100)]);
        s.passes = Some(2);
        let ops = drain(&mut Gen::new(s));
        assert_eq!(ops.len(), 22);
        assert_eq!(ops[0].offset, 1000);
        assert_eq!(ops[10].offset, 1000 + 10 * 4096);
        assert_eq!(ops[10].len, 100);
        assert_eq!(ops[11].offset, 1000);
        assert!(ops.iter().all(|o| o.dir == Dir::Read));
    }

    #[test]
    fn random_covers_every_block_once_per_pass() {
        let mut s = shape(vec![(4096, 1000 * 4096)]);
        s.random = true;
        s.passes = Some(3);
        let ops = drain(&mut Gen::new(s));
        assert_eq!(ops.len(), 3000);
        for pass in ops.chunks(1000) {
            let mut offs: Vec<u64> = pass.iter().map(|o| o.offset).collect();
            offs.sort_unstable();
            offs.dedup();
            assert_eq!(offs.len(), 1000, "a block repeated within a pass");
            assert!(offs
                .iter()
                .all(|o| o % 4096 == 0 && (4096..4096 + 1000 * 4096).contains(o)));
        }
        // Not in order.
        assert!(ops.windows(2).any(|w| w[1].offset < w[0].offset));
        // The passes differ.
        assert_ne!(ops[..1000], ops[1000..2000]);
    }

    #[test]
    fn norandommap_draws_with_repeats_but_keeps_the_count() {
        let mut s = shape(vec![(0, 64 * 4096)]);
        s.random = true;
        s.norandommap = true;
        let ops = drain(&mut Gen::new(s));
        assert_eq!(ops.len(), 64);
        let mut offs: Vec<u64> = ops.iter().map(|o| o.offset).collect();
        offs.sort_unstable();
        offs.dedup();
        assert!(
            offs.len() < 64,
            "64 draws of 64 blocks with no repeat is unlikely"
        );
    }

    #[test]
    fn the_same_seed_repeats_the_run() {
        let mut s = shape(vec![(0, 256 * 4096)]);
        s.random = true;
        let a = drain(&mut Gen::new(s.clone()));
        let b = drain(&mut Gen::new(s.clone()));
        assert_eq!(a, b);
        s.seed = 2;
        assert_ne!(a, drain(&mut Gen::new(s)));
    }

    #[test]
    fn round_robin_alternates_files() {
        let ops = drain(&mut Gen::new(shape(vec![(0, 3 * 4096), (0, 3 * 4096)])));
        let files: Vec<usize> = ops.iter().map(|o| o.file).collect();
        assert_eq!(files, [0, 1, 0, 1, 0, 1]);
        assert_eq!(ops[2].offset, 4096);
    }

    #[test]
    fn round_robin_takes_n_ios_per_turn() {
        let mut s = shape(vec![(0, 4 * 4096), (0, 4 * 4096)]);
        s.per_turn = 2;
        let files: Vec<usize> = drain(&mut Gen::new(s)).iter().map(|o| o.file).collect();
        assert_eq!(files, [0, 0, 1, 1, 0, 0, 1, 1]);
    }

    #[test]
    fn sequential_service_finishes_a_file_first() {
        let mut s = shape(vec![(0, 2 * 4096), (0, 2 * 4096), (0, 2 * 4096)]);
        s.service = FileService::Sequential;
        let files: Vec<usize> = drain(&mut Gen::new(s)).iter().map(|o| o.file).collect();
        assert_eq!(files, [0, 0, 1, 1, 2, 2]);
    }

    #[test]
    fn random_service_reaches_every_file_and_every_block() {
        let mut s = shape((0..8).map(|_| (0u64, 4 * 4096u64)).collect());
        s.service = FileService::Random;
        let ops = drain(&mut Gen::new(s));
        assert_eq!(ops.len(), 32);
        for f in 0..8 {
            assert_eq!(ops.iter().filter(|o| o.file == f).count(), 4);
        }
    }

    #[test]
    fn open_limit_keeps_few_files_in_service() {
        let mut s = shape((0..6).map(|_| (0u64, 2 * 4096u64)).collect());
        s.open_limit = 2;
        let files: Vec<usize> = drain(&mut Gen::new(s)).iter().map(|o| o.file).collect();
        assert_eq!(files.len(), 12);
        // Only files 0 and 1 are served until one of them is done.
        assert!(files[..3].iter().all(|&f| f < 2), "{files:?}");
        assert!(files.contains(&5));
    }

    #[test]
    fn io_size_beyond_the_files_goes_round_again() {
        let mut s = shape(vec![(0, 2 * 4096)]);
        s.pass_bytes = 5 * 4096;
        let ops = drain(&mut Gen::new(s));
        let offs: Vec<u64> = ops.iter().map(|o| o.offset).collect();
        assert_eq!(offs, [0, 4096, 0, 4096, 0]);
    }

    #[test]
    fn io_size_below_the_files_stops_early() {
        let mut s = shape(vec![(0, 8 * 4096)]);
        s.pass_bytes = 3 * 4096 + 10;
        let ops = drain(&mut Gen::new(s));
        assert_eq!(ops.len(), 4);
        assert_eq!(ops[3].len, 10);
    }

    #[test]
    fn mixed_direction_follows_the_percentage() {
        let mut s = shape(vec![(0, 1 << 30)]);
        s.read_pct = 70;
        let mut g = Gen::new(s);
        let reads = (0..10_000)
            .filter(|_| g.next_op().unwrap().dir == Dir::Read)
            .count();
        assert!((6500..7500).contains(&reads), "{reads} reads of 10000");
    }

    #[test]
    fn time_based_never_ends_by_itself() {
        let mut s = shape(vec![(0, 8192)]);
        s.passes = None;
        let mut g = Gen::new(s);
        for _ in 0..1000 {
            assert!(g.next_op().is_some());
        }
    }

    #[test]
    fn permutations_are_bijections_for_awkward_sizes() {
        for n in [1u64, 2, 3, 5, 63, 64, 65, 1000, 4097] {
            let mut p = Permutation::new(n, n * 7);
            let mut seen = vec![false; n as usize];
            while let Some(x) = p.next() {
                assert!(!seen[x as usize], "n={n}: {x} twice");
                seen[x as usize] = true;
            }
            assert!(seen.iter().all(|&s| s), "n={n}");
        }
    }
}
