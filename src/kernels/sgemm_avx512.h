// Our own single-precision GEMM for CPUs with AVX-512, GotoBLAS/BLIS style: the operands are cut
// into cache-sized blocks, packed into contiguous panels, and multiplied by a register-blocked
// micro-kernel. Contract: exactly gemm<float>'s (kernels/matmul.h): row-major,
//
//   C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C,
//   A stored [M,K] (lda >= K), or [K,M] when trans_a (lda >= M);
//   B stored [K,N] (ldb >= N), or [N,K] when trans_b (ldb >= K); ldc >= N;
//   beta == 0 overwrites C without reading it (C may hold NaN); alpha == 0 (or K == 0) only
//   scales C by beta, without reading A or B.
//
// Why it exists: these machines set OPENBLAS_CORETYPE=Haswell, so OpenBLAS runs its AVX2 kernel
// (8 lanes) on a core with full-width AVX-512 FMAs (16 lanes): at most half this CPU's peak.
//
// The loops (BLIS's five around the micro-kernel):
//
//   for jc in N, step NC                      B block [KC x NC]  -> packed, read from L3
//     for pc in K, step KC                    (blocks of K in a fixed order: see Determinism)
//       pack B[pc:pc+KC, jc:jc+NC] into NR-column panels, each [KC][NR]
//       for ic in M, step MC                  A block [MC x KC]  -> packed, stays in L2
//         pack A[ic:ic+MC, pc:pc+KC] into MR-row panels, each [KC][MR]
//         for jr in NC, step NR               one B panel [KC x NR] stays in L2 ...
//           for ir in MC, step MR             ... while the MC / MR A panels of the block use it
//             C[MR x NR] (+)= A panel * B panel, the micro-kernel
//
// Micro-kernel: MR x NR = 14 x 32. The tile lives in 28 of the 32 zmm registers (14 rows x 2
// vectors of 16 floats); each step of k loads two B vectors and broadcasts 14 A values: 28 FMAs
// against 16 loads, so the two FMA pipes, not the loads, set the pace, and 28 independent
// accumulator chains cover the FMA latency (4 cycles x 2 pipes = 8 in flight) with room to spare.
// Measured (2 threads, n = 1024 and four training shapes): 14 x 32 and 12 x 32 tie, 8 x 48 and
// 6 x 64 are 0-8% slower, 16 x 32 (32 accumulators: spills) 4-13% slower.
//
// Block sizes for this CPU (AMD EPYC Zen 5: 48 KiB L1d, 1 MiB L2 per core, 32 MiB shared L3;
// /sys/devices/system/cpu/cpu0/cache). At full speed a step of k takes 14 cycles and reads
// 128 B of B and 56 B of A: 13 B per cycle, a fifth of what L2 delivers to L1, so the panels
// need not sit in L1. What the blocking must amortise instead is the C tile: each micro-kernel
// call reads and writes 14 x 32 floats of C, often from L3 or memory, whatever KC is.
//   KC = 768: a long K block spreads that cost over more FMAs and passes over C less often
//             (measured: KC 256 -> 768 gains 7-16% on the shapes with K >= 384, e.g. n = 2048:
//             414 -> 459 GFLOP/s; 1024 and 1536 were no better); one B panel is
//             768 x 32 x 4 B = 96 KiB, in L2.
//   MC = 168 (12 panels of 14 rows): the A block is 168 x 768 x 4 B = 504 KiB, so block and
//             B panel (600 KiB) stay in the 1 MiB L2; MC from 84 to 672 measured the same
//             within noise.
//   NC = 2048: the B block is 768 x 2048 x 4 B = 6 MiB per thread, 12 of the 32 MiB L3 for two
//             threads; it is read from L3 once per A block (168 rows), a few GB/s.
// K is cut into ceil(K / 768) equal blocks (so K = 1536 gives 2 x 768, K = 1000 2 x 500), and M
// and N likewise into equal blocks of at most MC and NC, rounded to whole panels. Packing reads a
// row-major operand 8 rows at a time from start to end (a few sequential streams the prefetcher
// follows; one panel at a time would be hundreds of strided 128-byte reads: the 256 x 50257 x 768
// product without transposes ran at 167 GFLOP/s that way, 370 this way, both with KC = 256).
//
// Edges: packing zero-pads the last A panel to MR rows and the last B panel to NR columns, so the
// micro-kernel always runs the full tile; only its loads and stores of C are masked (columns) and
// limited (rows). No transpose case is special past the packing: op(A) and op(B) are read in
// place, with their leading dimensions, and transposed 16 x 16 in registers where needed.
//
// Threads: C is cut into one slab per thread, by rows (M >= N) or by columns (N > M), in whole
// panels; each thread packs its own blocks (the other operand is packed once per thread, a cost
// of O(K (M + N)) against O(M N K)). Under 1 MFLOP one thread runs it all.
//
// Determinism: every C element is one chain of FMAs over k = 0..K-1 in order, restarted at each
// K block, and each block's sum s is folded in as C = alpha * s + beta' * C (beta' = beta for
// the first block, 1 after). The slabs are disjoint and the K blocking depends on K alone, so the
// result is bit-identical for any thread count.
//
// Without AVX-512 (the portable -DTFORMER_NATIVE=OFF build) sgemm_avx512 calls cblas_sgemm.
#pragma once

#include <cstdint>

namespace tformer {

// True when this build has the AVX-512 kernel (compiled with __AVX512F__).
bool sgemm_avx512_compiled();

// gemm<float>'s contract (see above). Threads: OpenMP's current count, one when called from a
// parallel region. Sizes are not checked here; gemm<float> checks them before dispatching.
void sgemm_avx512(float* C, int64_t ldc, const float* A, int64_t lda, bool trans_a, const float* B, int64_t ldb,
                  bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, float beta);

}  // namespace tformer
