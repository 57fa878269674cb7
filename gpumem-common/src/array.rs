//! CUDA array formats (`CUarray_format`), the bytes of one channel, and
//! the size of an array from its descriptor: what the kernel charges for
//! `cuArrayCreate`, `cuArray3DCreate` and `cuMipmappedArrayCreate`.

/// Bytes per channel of `format`, or 0 when gpumem does not know the
/// format (the array is then reported with size 0). Looked up in a
/// bit table rather than matched, to keep the entry programs free of
/// branches (see [`bytes`]).
pub const fn format_bytes(format: u32) -> u64 {
    // 2 bits per format code below 64: 0 unknown, else log2(bytes) + 1.
    const fn table(formats: &[(u32, u64)], base: u32) -> u64 {
        let mut t = 0u64;
        let mut i = 0;
        while i < formats.len() {
            let (f, code) = formats[i];
            if f >= base && f < base + 32 {
                t |= code << ((f - base) * 2);
            }
            i += 1;
        }
        t
    }
    const FORMATS: &[(u32, u64)] = &[
        (0x01, 1), // UNSIGNED_INT8
        (0x08, 1), // SIGNED_INT8
        (0x02, 2), // UNSIGNED_INT16
        (0x09, 2), // SIGNED_INT16
        (0x10, 2), // HALF
        (0x03, 3), // UNSIGNED_INT32
        (0x0a, 3), // SIGNED_INT32
        (0x20, 3), // FLOAT
    ];
    const LOW: u64 = table(FORMATS, 0);
    const HIGH: u64 = table(FORMATS, 32);
    let f = format as u64;
    let below_64 = (hidden(f.wrapping_sub(64)) >> 63).wrapping_neg();
    let high = (hidden(f >> 5) & 1).wrapping_neg();
    let shift = (f & 31) * 2;
    let code = (((LOW >> shift) & 3 & !high) | ((HIGH >> shift) & 3 & high)) & below_64;
    (1u64 << code) >> 1
}

/// Mipmap levels counted at most (a 64-bit dimension halves to 1 well
/// before; more levels add 1-texel levels gpumem does not chase).
pub const MAX_LEVELS: u32 = 16;

/// The descriptor's size in bytes: width x height x depth x channel
/// bytes x channels, zero dimensions counting as 1 (as the driver
/// treats them), summed over `levels` mipmap levels (each halving every
/// dimension, at least 1; at most [`MAX_LEVELS`]).
///
/// Branch-free: the eBPF verifier walks every path through an entry
/// program separately, and the branches of a level loop multiplied its
/// work (and the agent's start-up) several times over.
pub const fn bytes(width: u64, height: u64, depth: u64, format: u32, channels: u32, levels: u32) -> u64 {
    let per = format_bytes(format) * channels as u64;
    let (mut w, mut h, mut d) = (max1(width), max1(height), max1(depth));
    let mut total = 0u64;
    // Bit `l` set for each level `l` counted: a mask computed once,
    // rather than a comparison with `levels` in every round (which the
    // compiler turns into a branch for the verifier to split on).
    let levels = if levels > MAX_LEVELS { MAX_LEVELS } else { levels };
    let counted = (1u64 << levels) - 1;
    let mut level = 0;
    while level < MAX_LEVELS {
        // All ones while `level < levels`, else 0.
        let take = (hidden(counted >> level) & 1).wrapping_neg();
        total = total.wrapping_add(mul(mul(mul(w, h), d), per) & take);
        w = max1(w >> 1);
        h = max1(h >> 1);
        d = max1(d >> 1);
        level += 1;
    }
    total
}

/// `a * b`, wrapping. Any overflow check (`saturating_mul`, or a
/// division test, which LLVM recognises as one) compiles to a 128-bit
/// multiply the BPF backend does not have; a size that overflows 64 bits
/// cannot be allocated by the driver, whose failure is then reported.
pub const fn mul(a: u64, b: u64) -> u64 {
    a.wrapping_mul(b)
}

/// `v`, or 1 for 0, without a branch: `(v - 1) & !v` has its top bit
/// set only for 0.
const fn max1(v: u64) -> u64 {
    v | (hidden(v.wrapping_sub(1) & !v) >> 63)
}

/// `v`, through a value the compiler cannot see into: LLVM recognises
/// the masks above as comparisons (`v == 0`, `f < 64`, a level taken or
/// not) and, the BPF target having no conditional move, emits each as a
/// branch, which the verifier walks both ways: the six of an entry made 64
/// paths into the level loop, and the array computation was half of what
/// `alloc_entry`'s verification walked.
const fn hidden(v: u64) -> u64 {
    core::hint::black_box(v)
}

#[cfg(test)]
mod tests {
    use super::{bytes, mul};

    #[test]
    fn array_sizes_from_descriptors() {
        // 1024 x 768 float4: 12 MiB.
        assert_eq!(bytes(1024, 768, 0, 0x20, 4, 1), 1024 * 768 * 16);
        // 1D array of 100 bytes: height and depth 0 count as 1.
        assert_eq!(bytes(100, 0, 0, 0x01, 1, 1), 100);
        // 3D half2 volume.
        assert_eq!(bytes(64, 32, 8, 0x10, 2, 1), 64 * 32 * 8 * 4);
        // Mipmaps: 8x8 + 4x4 + 2x2 + 1x1 of uint8.
        assert_eq!(bytes(8, 8, 0, 0x01, 1, 4), 64 + 16 + 4 + 1);
        // Unknown formats are reported with size 0, never guessed.
        assert_eq!(bytes(8, 8, 0, 0xb0, 1, 1), 0);
        assert_eq!(bytes(8, 8, 0, 0x60, 1, 1), 0);
        assert_eq!(mul(3, 5), 15);
        // Levels beyond the halving to 1 add 1-texel levels, up to the cap.
        assert_eq!(bytes(2, 0, 0, 0x01, 1, 4), 2 + 1 + 1 + 1);
        assert_eq!(bytes(1, 1, 1, 0x01, 1, 100), u64::from(super::MAX_LEVELS));
        assert_eq!(bytes(u64::MAX, 1, 1, 0x01, 1, 1), u64::MAX);
        assert_eq!(bytes(8, 8, 0, 0x01, 1, 0), 0);
    }

    #[test]
    fn format_bytes_knows_exactly_the_cuda_array_formats() {
        let known = [(0x01, 1), (0x08, 1), (0x02, 2), (0x09, 2), (0x10, 2), (0x03, 4), (0x0a, 4), (0x20, 4)];
        for f in 0..=300u32 {
            let want = known.iter().find(|(k, _)| *k == f).map_or(0, |(_, b)| *b);
            assert_eq!(super::format_bytes(f), want, "format {f:#x}");
        }
        assert_eq!(super::format_bytes(u32::MAX), 0);
    }
}
